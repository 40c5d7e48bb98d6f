// Device-side element types of the non-attention kernels: float, __half and
// __nv_bfloat16 with fp32 conversions, and a dispatch macro that turns a
// runtime DType into the type (failing loudly on anything else).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/check.h"
#include "common/dtype.h"

namespace vpod::kernels {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Eight fp16/bf16 elements: one 16-byte load or store.
template <typename T>
struct alignas(16) Chunk8 {
  T v[8];
};

__host__ __device__ inline bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? partial[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace vpod::kernels

// VPOD_DISPATCH_DTYPE(dtype, T, { body using T });
#define VPOD_DISPATCH_DTYPE(dtype, T, ...)                 \
  do {                                                     \
    switch (dtype) {                                       \
      case ::vpod::DType::f32: {                           \
        using T = float;                                   \
        __VA_ARGS__;                                       \
        break;                                             \
      }                                                    \
      case ::vpod::DType::f16: {                           \
        using T = __half;                                  \
        __VA_ARGS__;                                       \
        break;                                             \
      }                                                    \
      case ::vpod::DType::bf16: {                          \
        using T = __nv_bfloat16;                           \
        __VA_ARGS__;                                       \
        break;                                             \
      }                                                    \
      default: VPOD_CHECK_MSG(false, "unsupported dtype"); \
    }                                                      \
  } while (0)
