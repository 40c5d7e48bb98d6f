// The CPU references of RMSNorm and of RMSNorm with a fused residual add
// (rms_norm.h), in fp32.

#include <cmath>

#include "kernels/norm/rms_norm.h"

namespace vpod::kernels {

void rms_norm_ref(const float* x, std::int64_t x_stride, const float* weight, float eps, float* out,
                  std::int64_t out_stride, int rows, int dim) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    double sum = 0.0;
    for (int i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum / dim) + eps);
    for (int i = 0; i < dim; ++i) o[i] = xr[i] * inv * weight[i];
  }
}

void add_rms_norm_ref(float* residual, std::int64_t residual_stride, const float* delta,
                      std::int64_t delta_stride, const float* weight, float eps, float* out,
                      std::int64_t out_stride, int rows, int dim) {
  for (int r = 0; r < rows; ++r) {
    float* res = residual + r * residual_stride;
    const float* d = delta + r * delta_stride;
    for (int i = 0; i < dim; ++i) res[i] += d[i];
  }
  rms_norm_ref(residual, residual_stride, weight, eps, out, out_stride, rows, dim);
}

}  // namespace vpod::kernels
