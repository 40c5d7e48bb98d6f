// The small kernels around attention: KV append and the split combine.
#include <algorithm>
#include <string>

#include "common/cuda_check.h"
#include "kernels/attention/attention_device.cuh"
#include "kernels/attention/attention_kernels.h"

namespace vpod::attention::device {
namespace {

constexpr int kAppendThreads = 256;
// Enough CTAs to cover the GPU several times; the kernel loops beyond that.
constexpr int kAppendMaxCtas = 4096;
constexpr int kCombineThreads = 128;

// Copies each new token's K and V rows (16 bytes per thread) into the cache.
__global__ void __launch_bounds__(kAppendThreads)
    append_kv_kernel(const __grid_constant__ AppendParams p) {
  const int chunks_per_row = p.head_dim * p.element_bytes / 16;
  const std::int64_t total =
      static_cast<std::int64_t>(p.num_tokens) * p.num_kv_heads * chunks_per_row;
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int chunk = static_cast<int>(idx % chunks_per_row);
    const std::int64_t rest = idx / chunks_per_row;
    const int head = static_cast<int>(rest % p.num_kv_heads);
    const int token = static_cast<int>(rest / p.num_kv_heads);
    const TokenSlot ts = p.token_slots[token];
    const std::int64_t dst = kv_offset(p.kv, ts.slot, ts.position, head) * p.element_bytes;
    const std::int64_t head_bytes = static_cast<std::int64_t>(head) * p.head_dim * p.element_bytes;
    const std::int64_t src_k = token * p.k_new_token_stride * p.element_bytes + head_bytes;
    const std::int64_t src_v = token * p.v_new_token_stride * p.element_bytes + head_bytes;
    *reinterpret_cast<uint4*>(static_cast<char*>(p.kv.k) + dst + chunk * 16) =
        *reinterpret_cast<const uint4*>(static_cast<const char*>(p.k_new) + src_k + chunk * 16);
    *reinterpret_cast<uint4*>(static_cast<char*>(p.kv.v) + dst + chunk * 16) =
        *reinterpret_cast<const uint4*>(static_cast<const char*>(p.v_new) + src_v + chunk * 16);
  }
}

// out = sum_s 2^(lse_s - M) O_s / sum_s 2^(lse_s - M), one warp per head,
// four columns per lane; grid (items, head groups of four). All splits -inf
// (cannot happen for causal rows) gives 0.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const __grid_constant__ CombineParams p) {
  using E = ElementTraits<T>;
  const CombineItem item = p.items[blockIdx.x];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const bool active = lane * 4 < p.head_dim;
  for (int head = static_cast<int>(blockIdx.y) * (kCombineThreads / 32) + warp;
       head < p.num_q_heads; head += static_cast<int>(gridDim.y) * (kCombineThreads / 32)) {
    float overall_max = -INFINITY;
    for (int s = lane; s < item.num_splits; s += 32) {
      const std::int64_t prow =
          static_cast<std::int64_t>(item.partial_row + s * item.partial_stride) * p.num_q_heads +
          head;
      overall_max = fmaxf(overall_max, p.partial_lse[prow]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      overall_max = fmaxf(overall_max, __shfl_xor_sync(0xffffffffu, overall_max, offset));
    }
    const float base = overall_max == -INFINITY ? 0.f : overall_max;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float total = 0.f;
    for (int s = 0; s < item.num_splits; ++s) {
      const std::int64_t prow =
          static_cast<std::int64_t>(item.partial_row + s * item.partial_stride) * p.num_q_heads +
          head;
      const float w = exp2_approx(p.partial_lse[prow] - base);
      total += w;
      if (active) {
        const float4 v =
            *reinterpret_cast<const float4*>(p.partial_o + prow * p.head_dim + lane * 4);
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
    }
    if (active) {
      const float inv = total > 0.f ? 1.f / total : 0.f;
      uint2 packed;
      packed.x = E::pack(acc.x * inv, acc.y * inv);
      packed.y = E::pack(acc.z * inv, acc.w * inv);
      T* dst = static_cast<T*>(p.out) + static_cast<std::int64_t>(item.token) * p.out_token_stride +
               static_cast<std::int64_t>(head) * p.head_dim + lane * 4;
      *reinterpret_cast<uint2*>(dst) = packed;
    }
  }
}

}  // namespace
}  // namespace vpod::attention::device

namespace vpod::attention::detail {

Status launch_append(const AppendParams& params, cudaStream_t stream) {
  const std::int64_t chunks = static_cast<std::int64_t>(params.num_tokens) * params.num_kv_heads *
                              (params.head_dim * params.element_bytes / 16);
  if (chunks == 0) return Status();
  const int ctas = static_cast<int>(std::min<std::int64_t>(
      device::kAppendMaxCtas, (chunks + device::kAppendThreads - 1) / device::kAppendThreads));
  device::append_kv_kernel<<<ctas, device::kAppendThreads, 0, stream>>>(params);
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  return Status();
}

Status launch_combine(const CombineParams& params, DType dtype, int head_dim, cudaStream_t stream) {
  if (params.num_items == 0) return Status();
  if (head_dim % 4 != 0 || head_dim > 128) {
    return unimplemented("attention combine supports head_dim <= 128, got " +
                         std::to_string(head_dim));
  }
  const int warps = device::kCombineThreads / 32;
  const dim3 grid(static_cast<unsigned>(params.num_items),
                  static_cast<unsigned>((params.num_q_heads + warps - 1) / warps));
  if (dtype == DType::f16) {
    device::combine_kernel<half><<<grid, device::kCombineThreads, 0, stream>>>(params);
  } else if (dtype == DType::bf16) {
    device::combine_kernel<__nv_bfloat16><<<grid, device::kCombineThreads, 0, stream>>>(params);
  } else {
    return unimplemented("attention combine supports fp16 and bf16");
  }
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  return Status();
}

Result<int> ctas_per_sm(KernelKind kind, DType dtype, int head_dim) {
  if (kind == KernelKind::decode_heads && (dtype == DType::f16 || dtype == DType::bf16)) {
    return decode_heads_ctas_per_sm(dtype, head_dim);
  }
  if (dtype == DType::f16) return ctas_per_sm_f16(kind, head_dim);
  if (dtype == DType::bf16) return ctas_per_sm_bf16(kind, head_dim);
  return unimplemented("attention kernels support fp16 and bf16");
}

Result<int> ws_multicast_clusters(DType dtype, int head_dim) {
  if (dtype == DType::f16) return ws_multicast_clusters_f16(head_dim);
  if (dtype == DType::bf16) return ws_multicast_clusters_bf16(head_dim);
  return unimplemented("attention kernels support fp16 and bf16");
}

}  // namespace vpod::attention::detail
