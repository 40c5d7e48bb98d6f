// The engine's view of the model runtime: run one hybrid batch, sample one
// token for each sequence that completes its known tokens this step. The real
// runtime (src/model) implements it; policy tests use a deterministic double.
#pragma once

#include <cstdint>
#include <span>

#include "common/hybrid_batch.h"
#include "common/status.h"
#include "engine/request.h"
#include "engine/token_logprobs.h"

namespace vpod::engine {

// One sequence that samples this step: a decode, or a prefill chunk that
// reaches the end of the request's known tokens. Partial prefill chunks
// sample nothing (their logits need not be computed).
struct SampleSpec {
  int token_index = 0;     // row of the flattened batch whose logits are sampled (last new token)
  int sequence_index = 0;  // the sequence's index in [prefills..., decodes...] (its logit row)
  const SamplingParams* params = nullptr;
  std::uint64_t seed = 0;     // per request; with `output_index` keys a counter-based RNG so
  int output_index = 0;       // the k-th token of a request is the same after preemption
  int num_prompt_tokens = 0;  // token_ids[0, num_prompt_tokens) is the prompt
  std::span<const std::int32_t> token_ids;       // prompt ++ generated so far (for penalties)
  std::span<const std::int32_t> suppressed_ids;  // logits forced to -inf (stop ids before
                                                 // min_tokens)
  int num_logprobs = -1;                         // -1: none; 0: sampled token's; N: plus top N
  // Structured output: the request's grammar (null: unconstrained). The
  // executor advances its matcher over the outputs it has not seen (in
  // token_ids), then fills its next-token bitmask, on its own threads; the
  // engine thread never touches it (docs/structured_output.md).
  grammar::GrammarState* grammar = nullptr;
};

// Prompt logprobs: rows of one prefill chunk whose next token is a prompt
// token; the executor reports each such token's logprob, rank and top-N.
struct PromptScoreSpec {
  int first_row = 0;  // row of the flattened batch of the first scored token
  int num_rows = 0;
  int num_top = 0;                        // top-N per row besides the prompt token
  std::span<const std::int32_t> targets;  // [num_rows]: the prompt token after each row
};

// A step's prompt scoring: the specs, and one output per scored row (specs
// in order, each spec's rows in order).
struct PromptScores {
  std::span<const PromptScoreSpec> specs;
  std::span<SampledToken> out;
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;

  // Runs `batch` (whose K/V slots the KV cache has backed) and writes one
  // sampled token per entry of `samples` into `out` (same length), and the
  // logprobs of the prompt tokens `scores` asks for into scores.out. A
  // failure (device error) is returned; the engine then fails the batch's
  // requests.
  virtual Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                         std::span<SampledToken> out, const PromptScores& scores) = 0;

  // The same step in two halves, for the engine's pipelined loop: launch()
  // enqueues the step and may return before it ran; wait() blocks until
  // `out` holds the sampled tokens. Between the two calls the engine keeps
  // `batch`, `samples`, `out`, `scores` and what they point to (requests' token ids,
  // sampling parameters) unchanged, and does its CPU work of the previous
  // step (detokenization, stop strings, streaming) meanwhile. A failure of
  // either half fails the step. Default: launch() is forward(), wait() has
  // nothing left to do (executors whose forward is synchronous).
  virtual Status launch(const HybridBatch& batch, std::span<const SampleSpec> samples,
                        std::span<SampledToken> out, const PromptScores& scores) {
    return forward(batch, samples, out, scores);
  }
  virtual Status wait() { return {}; }
};

}  // namespace vpod::engine
