// The simple exact GPU attention (simple_attention.h): the kernel, one CTA per
// (token, query head), and its launcher.

#include "common/cuda_check.h"
#include "kernels/dtype_dispatch.cuh"
#include "model/simple_attention.h"

namespace vpod::model {

namespace {

using kernels::from_float;
using kernels::to_float;

constexpr int kThreads = 128;
constexpr int kChunk = 512;  // keys scored per pass (shared memory)
constexpr int kMaxHeadDim = 256;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;

struct SimpleAttentionParams {
  const void* q;
  void* out;
  std::int64_t q_stride, out_stride;
  const void* k;
  const void* v;
  std::int64_t slot_stride, token_stride, head_stride;
  const std::int32_t* slots;
  const std::int32_t* kv_index;
  int q_heads, group, head_dim;
  float scale;
};

__device__ float block_max(float v) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float m = partial[0];
  for (int i = 1; i < kThreads / 32; ++i) m = fmaxf(m, partial[i]);
  return m;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    simple_attention_kernel(const __grid_constant__ SimpleAttentionParams p) {
  __shared__ float scores[kChunk];
  __shared__ float q_s[kMaxHeadDim];
  const int t = blockIdx.x;
  const int h = blockIdx.y;
  T* out = static_cast<T*>(p.out) + t * p.out_stride + static_cast<std::int64_t>(h) * p.head_dim;
  const int slot = p.slots[t];
  if (slot < 0) {
    for (int d = threadIdx.x; d < p.head_dim; d += kThreads) out[d] = from_float<T>(0.0f);
    return;
  }
  const T* q =
      static_cast<const T*>(p.q) + t * p.q_stride + static_cast<std::int64_t>(h) * p.head_dim;
  for (int d = threadIdx.x; d < p.head_dim; d += kThreads) q_s[d] = to_float(q[d]);
  const std::int64_t base =
      slot * p.slot_stride + static_cast<std::int64_t>(h / p.group) * p.head_stride;
  const T* k = static_cast<const T*>(p.k) + base;
  const T* v = static_cast<const T*>(p.v) + base;
  const int visible = p.kv_index[t] + 1;
  float acc[kDimsPerThread] = {};
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  __syncthreads();
  for (int begin = 0; begin < visible; begin += kChunk) {
    const int n = min(kChunk, visible - begin);
    float local_max = -INFINITY;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const T* kr = k + static_cast<std::int64_t>(begin + j) * p.token_stride;
      float s = 0.0f;
      for (int d = 0; d < p.head_dim; ++d) s += q_s[d] * to_float(kr[d]);
      s *= p.scale;
      scores[j] = s;
      local_max = fmaxf(local_max, s);
    }
    const float new_max = fmaxf(running_max, block_max(local_max));
    const float correction = __expf(running_max - new_max);  // 0 on the first chunk
    __syncthreads();
    float local_sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const float e = __expf(scores[j] - new_max);
      scores[j] = e;
      local_sum += e;
    }
    const float chunk_sum = kernels::block_sum(local_sum);  // syncs: scores[] complete
    running_sum = running_sum * correction + chunk_sum;
    running_max = new_max;
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = threadIdx.x + i * kThreads;
      if (d >= p.head_dim) break;
      float a = acc[i] * correction;
      for (int j = 0; j < n; ++j)
        a += scores[j] * to_float(v[static_cast<std::int64_t>(begin + j) * p.token_stride + d]);
      acc[i] = a;
    }
    __syncthreads();  // scores[] is rewritten by the next chunk
  }
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int d = threadIdx.x + i * kThreads;
    if (d < p.head_dim) out[d] = from_float<T>(acc[i] / running_sum);
  }
}

}  // namespace

void simple_attention_gpu(const TensorView& q, const KvLayerView& kv, const std::int32_t* slots,
                          const std::int32_t* kv_index, float scale, const TensorView& out,
                          cudaStream_t stream) {
  VPOD_CHECK_MSG(q.rank() == 3 && out.rank() == 3 && q.size(0) == out.size(0) &&
                     q.size(1) == out.size(1) && q.size(2) == kv.head_dim &&
                     out.size(2) == kv.head_dim && q.stride(2) == 1 && out.stride(2) == 1 &&
                     q.stride(1) == kv.head_dim && out.stride(1) == kv.head_dim &&
                     kv.head_dim <= kMaxHeadDim && q.size(1) % kv.num_kv_heads == 0 &&
                     q.dtype() == kv.dtype && out.dtype() == kv.dtype,
                 "simple_attention_gpu shapes: q " + q.to_string() + ", out " + out.to_string());
  if (q.size(0) == 0) return;
  SimpleAttentionParams p{};
  p.q = q.data();
  p.out = out.data();
  p.q_stride = q.stride(0);
  p.out_stride = out.stride(0);
  p.k = kv.k;
  p.v = kv.v;
  p.slot_stride = kv.slot_stride;
  p.token_stride = kv.token_stride;
  p.head_stride = kv.head_stride;
  p.slots = slots;
  p.kv_index = kv_index;
  p.q_heads = static_cast<int>(q.size(1));
  p.group = p.q_heads / kv.num_kv_heads;
  p.head_dim = kv.head_dim;
  p.scale = scale;
  const dim3 grid(static_cast<unsigned>(q.size(0)), static_cast<unsigned>(p.q_heads));
  VPOD_DISPATCH_DTYPE(q.dtype(), T,
                      { simple_attention_kernel<T><<<grid, kThreads, 0, stream>>>(p); });
  VPOD_CUDA_CHECK_LAUNCH();
}

}  // namespace vpod::model
