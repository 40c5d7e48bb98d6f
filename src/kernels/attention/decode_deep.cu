// The deep decode kernel: the tile decode (DecodeTile, one CTA per (item, KV
// head, head chunk), its 4 warps sharing each 64-key block) at one CTA per SM
// with a deep cp.async pipeline (6 stages of K/V for head_dim 128, 8 for 64:
// ~192 / 128 KB of shared memory), fp16 and bf16.
//
// Why: a decode batch whose (sequence, KV head) units nearly fill the SMs
// once but only half of the 2-per-SM CTA slots of the tile kernel (16 x 16K
// with 8 KV heads: 128 units on 132 SMs) had to be split in two to keep HBM
// busy, and the two halves of every unit merged (cluster merge: two cluster
// barriers and the split rows through distributed shared memory). One CTA
// per SM with 5 blocks (160 KB) in flight instead of two CTAs with 2 each
// (128 KB) streams the unit unsplit: no merge, no partial rows, no cluster,
// and the same bytes per SM in flight or more. The plan picks it
// (DecodeKernel::tile_deep, attention_plan.cpp) when the unsplit decodes fit
// one CTA per SM and the split tile plan is estimated slower; forced splits
// still work (the counter merge, merge_decode_splits).
//
// Shared memory: head_dim 128 needs 196 KB, more than an sm_80 CTA may opt
// into (163 KB); where the device cannot give it, decode_deep_supported() is
// false and the launcher runs the ordinary tile kernel on the same plan (the
// same items; only the grid's occupancy differs).
#include "cuda/per_device_once.h"
#include "kernels/attention/attention_kernels.cuh"

namespace vpod::attention {
namespace device {
namespace {

// K/V pipeline stages of the deep kernel: 6 x 32 KB (head_dim 128) or
// 8 x 16 KB (head_dim 64).
template <int kHeadDim>
constexpr int deep_stages() {
  return kHeadDim == 128 ? 6 : 8;
}

template <typename T, int kHeadDim>
using DeepTile = DecodeTile<T, kHeadDim, deep_stages<kHeadDim>()>;

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, 1)
    decode_deep_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  const int chunk = static_cast<int>(blockIdx.x) % params.decode_head_chunks;
  const int kv_head = static_cast<int>(blockIdx.x) / params.decode_head_chunks;
  const DecodeWorkItem item = params.plan.decode_items[blockIdx.y];
  DeepTile<T, kHeadDim>::run(params, item, kv_head, chunk, smem, static_cast<int>(threadIdx.x));
  if (params.plan.decode_counters != nullptr && item.combine >= 0) {
    merge_decode_splits<T, kHeadDim>(params, item.combine, kv_head, chunk,
                                     static_cast<int>(threadIdx.x));
  }
}

template <typename T, int kHeadDim>
Status prepare() {
  VPOD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(decode_deep_kernel<T, kHeadDim>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 DeepTile<T, kHeadDim>::kSmemBytes),
                            StatusCode::internal);
  return Status();
}

// Whether the current device gives a CTA the kernel's shared memory (opt-in
// limit; an H100/H200 does, an A100 does not for head_dim 128), asked once per
// process (its devices are alike). The opt-in itself is made on every device
// that launches it.
template <typename T, int kHeadDim>
bool supported() {
  static const bool ok = [] {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return optin >= DeepTile<T, kHeadDim>::kSmemBytes &&
           cuda::prepare_on_current_device<&prepare<T, kHeadDim>>().ok();
  }();
  return ok;
}

template <typename T>
Result<bool> deep_supported_typed(int head_dim) {
  bool ok = false;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, { ok = supported<T, kHeadDim>(); });
  return ok;
}

template <typename T>
Status deep_launch_typed(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (!supported<T, kHeadDim>()) {
      return failed_precondition("the deep decode kernel's shared memory exceeds this device's");
    }
    VPOD_RETURN_IF_ERROR((cuda::prepare_on_current_device<&prepare<T, kHeadDim>>()));
    const dim3 grid(static_cast<unsigned>(params.num_kv_heads * params.decode_head_chunks),
                    static_cast<unsigned>(params.num_decode_items));
    decode_deep_kernel<T, kHeadDim>
        <<<grid, kAttentionThreads, DeepTile<T, kHeadDim>::kSmemBytes, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Result<int> deep_ctas_per_sm_typed(int head_dim) {
  int ctas = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (!supported<T, kHeadDim>()) return 0;
    VPOD_RETURN_IF_ERROR((cuda::prepare_on_current_device<&prepare<T, kHeadDim>>()));
    VPOD_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                  &ctas, decode_deep_kernel<T, kHeadDim>, kAttentionThreads,
                                  DeepTile<T, kHeadDim>::kSmemBytes),
                              StatusCode::internal);
  });
  return ctas;
}

}  // namespace
}  // namespace device

namespace detail {

bool decode_deep_supported(DType dtype, int head_dim) {
  const Result<bool> ok = dtype == DType::f16
                              ? device::deep_supported_typed<half>(head_dim)
                              : device::deep_supported_typed<__nv_bfloat16>(head_dim);
  return ok.ok() && *ok;
}

Status launch_decode_deep(const AttentionParams& params, DType dtype, int head_dim,
                          cudaStream_t stream) {
  return dtype == DType::f16 ? device::deep_launch_typed<half>(params, head_dim, stream)
                             : device::deep_launch_typed<__nv_bfloat16>(params, head_dim, stream);
}

Result<int> decode_deep_ctas_per_sm(DType dtype, int head_dim) {
  return dtype == DType::f16 ? device::deep_ctas_per_sm_typed<half>(head_dim)
                             : device::deep_ctas_per_sm_typed<__nv_bfloat16>(head_dim);
}

}  // namespace detail
}  // namespace vpod::attention
