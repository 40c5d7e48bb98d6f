// Skinny GEMM for decode steps: out[M, N] = x[M, K] * w[N, K]^T (+ bias[N])
// for M <= kMaxGemvRows, fp16/bf16 inputs, fp32 accumulation, out in the
// input dtype or fp32 (logits).
//
// Why not cuBLASLt: at M = 1 the step is bound by reading w once, and
// cuBLASLt's heuristic picks a GEMM tile that reaches ~3.4 TB/s on the H200
// (docs/model.md). This kernel gives one warp per output column n: the warp
// streams w's row n with 16-byte non-allocating loads, several in flight per
// lane, multiplies them with the M rows of x (served from L1/L2), and reduces
// across the warp. Summation order is fixed, so results are deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include "common/tensor_view.h"

namespace vpod::kernels {

inline constexpr int kMaxGemvRows = 4;

// True when gemv_gpu handles these operands: 1 <= M <= kMaxGemvRows, x and w
// in f16/bf16 with the same dtype, out in that dtype or f32, bias (if any)
// [N] in out's dtype, contiguous last dims, K, row strides and base pointers
// aligned to 8 elements (16 bytes).
bool gemv_supported(const TensorView& x, const TensorView& w, const TensorView* bias,
                    const TensorView& out);

// Enqueues the GEMV on `stream`; the operands must satisfy gemv_supported
// (checked: a violation is a caller bug).
void gemv_gpu(const TensorView& x, const TensorView& w, const TensorView* bias,
              const TensorView& out, cudaStream_t stream);

}  // namespace vpod::kernels
