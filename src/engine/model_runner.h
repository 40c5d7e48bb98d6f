// ModelExecutor over the model runtime (src/model): one forward over the
// hybrid batch, then one sample per sequence that completes its tokens.
//
// Prompt logprobs: a step with prompt rows to score keeps every token's final
// hidden state; after sampling, the LM head runs over those rows in slices
// of the logits buffer's size (never a [prompt x vocab] buffer) and the
// sampler reads each row's raw logprobs.
//
// Sampling goes through the backend in one call per step (Backend::sample:
// penalties, temperature, top-k/p, min-p, seeded Gumbel-max, logprobs with
// kernels::sample's semantics): on the CPU backend kernels::sample per row,
// on CUDA the GPU sampler, so only token ids and logprobs cross PCIe.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "common/kv_view.h"
#include "engine/model_executor.h"
#include "grammar/bitmask_filler.h"
#include "kernels/sampling/sampling.h"
#include "model/model.h"

namespace vpod::engine {

// Sees each step's logits before they are sampled (`vpod generate
// --dump-logits`): [num_sequences, vocab] fp32 on the backend's device;
// `samples` names the rows that are sampled (SampleSpec::sequence_index).
using LogitsObserver =
    std::function<Status(const TensorView& logits, std::span<const SampleSpec> samples)>;

class ModelRunner final : public ModelExecutor {
 public:
  // `kv`: every layer of the KV cache the scheduler allocates in
  // (kvcache::KvStore::view(): vAttention or the paged baseline, whose
  // prepare path has put the step's block tables where the kernels read
  // them). Its entries must outlive the runner.
  ModelRunner(model::Model& model, const KvCacheView& kv);

  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out, const PromptScores& scores) override;
  // forward() without the sampling: the model's step as forward() runs it
  // (same logits mode), then the LM head over the prompt rows `scores` asks
  // for, slice by slice as forward() does, reading nothing. The ranks other
  // than 0 of a tensor-parallel group run this, so their collectives always
  // meet rank 0's.
  Status forward_logits(const HybridBatch& batch, const PromptScores& scores);

  // Optional; called on the thread that runs forward().
  void set_logits_observer(LogitsObserver observer) { logits_observer_ = std::move(observer); }

 private:
  // Prompt logprobs of the step just run (model_.row_logits in bounded
  // slices), sampled into scores.out unless `read` is false.
  Status score_prompts(const PromptScores& scores, bool read);
  static model::LogitsMode logits_mode(const PromptScores& scores) {
    return scores.specs.empty() ? model::LogitsMode::last_per_sequence
                                : model::LogitsMode::last_keep_hidden;
  }

  model::Model& model_;
  KvCacheView kv_;
  model::StepPlan plan_;  // the step's attention plan; its buffers are reused every step
  std::vector<kernels::SampleRequest> requests_;  // reused every step
  std::vector<kernels::SampleResult> results_;
  LogitsObserver logits_observer_;

  // Structured output: the step's constrained rows' token bitmasks, [max
  // sequences, mask_words_], and the threads that fill them; made at the
  // first constrained step (no cost otherwise, no allocation per step).
  Status fill_token_masks(std::span<const SampleSpec> samples);
  int mask_words_ = 0;
  std::vector<std::uint32_t> masks_;
  std::vector<grammar::Matcher*> mask_matchers_;
  std::vector<std::uint32_t*> mask_rows_;
  std::unique_ptr<grammar::BitmaskFiller> mask_filler_;
};

}  // namespace vpod::engine
