// The CPU reference of SwiGLU's gate (silu_mul.h), in fp32: what silu_mul_gpu
// must compute.

#include <cmath>

#include "kernels/activation/silu_mul.h"

namespace vpod::kernels {

void silu_mul_ref(const float* gate_up, std::int64_t in_stride, float* out, std::int64_t out_stride,
                  int rows, int inter) {
  for (int t = 0; t < rows; ++t) {
    const float* g = gate_up + t * in_stride;
    const float* u = g + inter;
    float* o = out + t * out_stride;
    for (int i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

}  // namespace vpod::kernels
