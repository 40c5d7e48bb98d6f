// Skinny GEMM for decode steps: out[M, N] = x[M, K] * w[N, K]^T (+ bias[N])
// for M <= kMaxGemvRows, fp16/bf16 inputs, fp32 accumulation, out in the
// input dtype or fp32 (logits).
//
// Why not cuBLASLt: at M = 1 the step is bound by reading w once, and
// cuBLASLt's heuristic picks a GEMM tile that reads w below the HBM bandwidth
// (docs/model.md, *Files*). This kernel gives one warp per output column n:
// the warp streams w's row n with 16-byte non-allocating loads, several in
// flight per lane, multiplies them with the M rows of x (served from L1/L2),
// and reduces across the warp. Summation order is fixed, so results are deterministic.
//
// Decode fusions (gemv_norm_gpu): the input rows can be the RMSNorm of a
// residual stream, computed by every CTA in its prologue (the residual add
// included, its result written once), and the output of a fused gate/up
// weight can be SiLU(gate) * up directly. Both give bitwise the results of
// the separate kernels (add_rms_norm_gpu, silu_mul_gpu): the same fp32
// operations in the same order, the same roundings to the storage dtype.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/tensor_view.h"
#include "kernels/launch_options.h"

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
              const TensorView& out, cudaStream_t stream, LaunchOptions launch = {});

// The GEMV's input computed in its prologue, for M = num_rows rows:
//   h[m]   = residual[r] (+ delta[r]) rounded to the dtype, r = rows ? rows[m] : m
//   x[m]   = h[m] / rms(h[m]) * weight          (add_rms_norm_gpu's arithmetic)
// and residual_out[m] = h[m] when set (written by one CTA; it must not alias
// residual or delta). rows: device array (e.g. a step's logit rows).
struct GemvNormInput {
  TensorView residual;  // [R, K]
  TensorView delta;     // [R, K], or unset (data() null): no residual add
  TensorView weight;    // [K]
  float eps = 1e-6f;
  TensorView residual_out;  // [M, K], or unset
  const std::int32_t* rows = nullptr;
  int num_rows = 0;
};

// Largest M * K * sizeof(dtype) the prologue keeps in shared memory.
inline constexpr std::int64_t kGemvNormMaxSmemBytes = 48 * 1024;

// silu_mul: w is a fused [2I, K] gate/up weight and out [M, I] receives
// silu(x w_gate^T) * (x w_up^T) with both products rounded to the dtype
// first (silu_mul_gpu's arithmetic); no bias.
bool gemv_norm_supported(const GemvNormInput& in, const TensorView& w, const TensorView* bias,
                         const TensorView& out, bool silu_mul);
void gemv_norm_gpu(const GemvNormInput& in, const TensorView& w, const TensorView* bias,
                   const TensorView& out, bool silu_mul, cudaStream_t stream,
                   LaunchOptions launch = {});

}  // namespace vpod::kernels
