// Sampling on the GPU with the semantics of sample() (sampling.h), so only
// token ids, their logprobs and the requested top-N logprobs come back to the
// host. One CTA per sampled row walks the row (kept in L2) in a fixed number
// of passes: penalties in place, max / log-normalizer, top-N by repeated
// arg-max, top-k by a radix select of the k-th value, top-p by a radix
// descent over cumulative probability mass, min-p, then the Gumbel-max draw
// with the same counter-based uniforms as the CPU.
//
// Parity with the CPU reference: greedy tokens are identical; a random
// draw is identical given the same uniforms (same seed and index) because
// the scaled logits, the Gumbel noise and the min-p threshold are computed
// with the same IEEE operations (no contraction, double logs rounded to
// float). Only sums differ in order (log-normalizer, top-p mass), so
// logprobs agree to float rounding and a top-p cut could differ only when
// the cumulative mass lands within double rounding of top_p.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "common/tensor_view.h"
#include "cuda/device_buffer.h"
#include "kernels/sampling/sampling.h"

namespace vpod::kernels {

inline constexpr int kMaxGpuTopLogprobs = 20;

class GpuSampler {
 public:
  // Buffers for up to `max_rows` requests per call over `vocab_size` logits.
  static Result<std::unique_ptr<GpuSampler>> create(int max_rows, int vocab_size);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // Samples each request's row of `logits` ([rows, vocab] fp32 on the GPU,
  // row stride free). Suppression, logit bias and penalties are applied to
  // those rows in place. Enqueued on `stream`, then waits for the results. `out` has one
  // entry per request (its `top` keeps its capacity: no allocation once
  // reserved to kMaxGpuTopLogprobs).
  Status sample(const TensorView& logits, std::span<const SampleRequest> requests,
                cudaStream_t stream, std::span<SampleResult> out);

 private:
  struct Impl;
  explicit GpuSampler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vpod::kernels
