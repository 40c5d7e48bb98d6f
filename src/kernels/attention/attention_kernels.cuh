// The attention kernels (thin wrappers around the tiles) and their typed
// launch functions, instantiated per element type in prefill_*.cu / decode_*.cu.
#pragma once

#include <string>

#include "common/cuda_check.h"
#include "kernels/attention/attention_kernels.h"
#include "kernels/attention/decode_tile.cuh"
#include "kernels/attention/prefill_tile.cuh"

// Turns a runtime head_dim into the constexpr `kName` for the body; an
// unsupported value returns `unimplemented` (validate_dims rejects it first).
#define VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kName, ...)                          \
  switch (head_dim) {                                                                   \
    case 64: {                                                                          \
      constexpr int kName = 64;                                                         \
      __VA_ARGS__                                                                       \
    } break;                                                                            \
    case 128: {                                                                         \
      constexpr int kName = 128;                                                        \
      __VA_ARGS__                                                                       \
    } break;                                                                            \
    default:                                                                            \
      return ::vpod::unimplemented("attention kernels are not compiled for head_dim " + \
                                   std::to_string(head_dim) + " (64, 128)");            \
  }

namespace vpod::attention::device {

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kPrefillCtasPerSm)
    prefill_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  PrefillTile<T, kHeadDim>::run(params, params.plan.prefill_items[blockIdx.y],
                                static_cast<int>(blockIdx.x), smem, static_cast<int>(threadIdx.x));
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kDecodeCtasPerSm)
    decode_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  const int chunk = static_cast<int>(blockIdx.x) % params.decode_head_chunks;
  const int kv_head = static_cast<int>(blockIdx.x) / params.decode_head_chunks;
  DecodeTile<T, kHeadDim>::run(params, params.plan.decode_items[blockIdx.y], kv_head, chunk, smem,
                               static_cast<int>(threadIdx.x));
}

template <typename T>
Status launch_prefill_typed(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    constexpr int kSmem = PrefillTile<T, kHeadDim>::kSmemBytes;
    auto* kernel = prefill_kernel<T, kHeadDim>;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
        StatusCode::internal);
    const dim3 grid(static_cast<unsigned>(params.num_q_heads),
                    static_cast<unsigned>(params.num_prefill_items));
    kernel<<<grid, kAttentionThreads, kSmem, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Status launch_decode_typed(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    constexpr int kSmem = DecodeTile<T, kHeadDim>::kSmemBytes;
    auto* kernel = decode_kernel<T, kHeadDim>;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
        StatusCode::internal);
    const dim3 grid(static_cast<unsigned>(params.num_kv_heads * params.decode_head_chunks),
                    static_cast<unsigned>(params.num_decode_items));
    kernel<<<grid, kAttentionThreads, kSmem, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Result<int> ctas_per_sm_typed(detail::KernelKind kind, int head_dim) {
  int ctas = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (kind == detail::KernelKind::prefill) {
      constexpr int kSmem = PrefillTile<T, kHeadDim>::kSmemBytes;
      auto* kernel = prefill_kernel<T, kHeadDim>;
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
          StatusCode::internal);
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kAttentionThreads, kSmem),
          StatusCode::internal);
    } else {
      constexpr int kSmem = DecodeTile<T, kHeadDim>::kSmemBytes;
      auto* kernel = decode_kernel<T, kHeadDim>;
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
          StatusCode::internal);
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kAttentionThreads, kSmem),
          StatusCode::internal);
    }
  });
  return ctas;
}

}  // namespace vpod::attention::device
