// Row RMSNorm in two passes, shared by rms_norm_gpu / add_rms_norm_gpu and
// the GEMV's fused prologue (gemv_norm_gpu) so that both give the same bits:
// thread t of the block handles the 16-byte chunks t, t + blockDim.x, ... of
// the row, accumulates v*v in element order with fmaf, and the partials meet
// in block_sum. Rows must be 16-byte aligned with dim % 8 == 0.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dtype_dispatch.cuh"

namespace vpod::kernels {

// h = src (+ delta), rounded to T, stored to dst and (if set) dst2; returns
// the block's sum of h^2 (every thread gets it). dst may alias src.
template <typename T>
__device__ __forceinline__ float rms_pass1(const T* src, const T* delta, T* dst, T* dst2, int dim) {
  const int chunks = dim / 8;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    Chunk8<T> h = reinterpret_cast<const Chunk8<T>*>(src)[c];
    if (delta != nullptr) {
      const Chunk8<T> d = reinterpret_cast<const Chunk8<T>*>(delta)[c];
#pragma unroll
      for (int j = 0; j < 8; ++j) h.v[j] = from_float<T>(to_float(h.v[j]) + to_float(d.v[j]));
    }
    if (dst != nullptr) reinterpret_cast<Chunk8<T>*>(dst)[c] = h;
    if (dst2 != nullptr) reinterpret_cast<Chunk8<T>*>(dst2)[c] = h;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float v = to_float(h.v[j]);
      sum = fmaf(v, v, sum);
    }
  }
  return block_sum(sum);
}

// out = h * inv * weight, with inv = rsqrt(sum / dim + eps). out may alias h.
template <typename T>
__device__ __forceinline__ void rms_pass2(const T* h, const T* weight, float sum, float eps, T* out,
                                          int dim) {
  const float inv = rsqrtf(sum / static_cast<float>(dim) + eps);
  const int chunks = dim / 8;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const Chunk8<T> x = reinterpret_cast<const Chunk8<T>*>(h)[c];
    const Chunk8<T> w = reinterpret_cast<const Chunk8<T>*>(weight)[c];
    Chunk8<T> o;
#pragma unroll
    for (int j = 0; j < 8; ++j) o.v[j] = from_float<T>(to_float(x.v[j]) * inv * to_float(w.v[j]));
    reinterpret_cast<Chunk8<T>*>(out)[c] = o;
  }
}

}  // namespace vpod::kernels
