// The model's GEMMs: out[M, N] = x[M, K] * w[N, K]^T (+ bias[N]), i.e. a
// Hugging Face Linear with w in its stored [out_features, in_features]
// layout. CPU reference in fp32; the GPU path is cuBLASLt (cublaslt.h).
#pragma once

#include <cstdint>

namespace vpod::kernels {

// Row-major, row strides in elements. Splits N over `num_threads` threads.
void gemm_ref(const float* x, std::int64_t x_stride, const float* w, std::int64_t w_stride,
              const float* bias, float* out, std::int64_t out_stride, int m, int n, int k,
              int num_threads = 1);

}  // namespace vpod::kernels
