// RMSNorm, with and without a fused residual add, and its per-head form
// (Qwen3's q_norm / k_norm). CPU references in float32 and the GPU launchers.
//   rms_norm(x)[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]   (math in fp32)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/tensor_view.h"

namespace vpod::kernels {

// ---- CPU references (fp32, rows of `dim` elements at the given strides) ----
void rms_norm_ref(const float* x, std::int64_t x_stride, const float* weight, float eps, float* out,
                  std::int64_t out_stride, int rows, int dim);
// residual += delta, then out = rms_norm(residual).
void add_rms_norm_ref(float* residual, std::int64_t residual_stride, const float* delta,
                      std::int64_t delta_stride, const float* weight, float eps, float* out,
                      std::int64_t out_stride, int rows, int dim);

// ---- GPU launchers: all views on the device, one dtype (f32, f16, bf16) ----
// x, out [rows, dim] (row strides free, dim contiguous); weight [dim].
void rms_norm_gpu(const TensorView& x, const TensorView& weight, float eps, const TensorView& out,
                  cudaStream_t stream);
// residual [rows, dim] updated in place (rounded to its dtype before the
// norm, as a framework running in that dtype does); delta, out [rows, dim].
void add_rms_norm_gpu(const TensorView& residual, const TensorView& delta, const TensorView& weight,
                      float eps, const TensorView& out, cudaStream_t stream);
// x [rows, heads, head_dim] normalized per head in place; weight [head_dim].
void head_rms_norm_gpu(const TensorView& x, const TensorView& weight, float eps,
                       cudaStream_t stream);

}  // namespace vpod::kernels
