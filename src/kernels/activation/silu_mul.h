// SwiGLU's gate: out[t, i] = silu(gate_up[t, i]) * gate_up[t, I + i], where
// silu(x) = x / (1 + exp(-x)) and gate_up holds gate_proj then up_proj
// outputs ([T, 2I], the fused projection's layout).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/tensor_view.h"

namespace vpod::kernels {

void silu_mul_ref(const float* gate_up, std::int64_t in_stride, float* out, std::int64_t out_stride,
                  int rows, int inter);

// gate_up [T, 2I], out [T, I]; same dtype (f32, f16, bf16).
void silu_mul_gpu(const TensorView& gate_up, const TensorView& out, cudaStream_t stream);

}  // namespace vpod::kernels
