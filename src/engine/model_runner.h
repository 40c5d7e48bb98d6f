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
#include "grammar/mask_workers.h"
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

  // Structured output: whether a decode row whose grammar job is still
  // running once the forward is done sits the step out (SampledToken::
  // deferred) instead of stalling the batch. Default: on for the GPU, where
  // the forward runs while the jobs do; off for the CPU backend, whose
  // forward is done before the jobs start (tests turn it on there to force
  // deferrals).
  void set_defer_unready_masks(bool on) { defer_unready_masks_ = on; }

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

  // Structured output: submits each constrained sample's job (accept its
  // new outputs, fill its mask) and waits for them, or, for decode rows when
  // deferral is on, until the forward is done; mask_deferred_[i] marks the
  // rows that sit the step out. The threads are made at the first
  // constrained step (no cost otherwise, no allocation per step).
  Status await_token_masks(const HybridBatch& batch, std::span<const SampleSpec> samples);
  bool defer_unready_masks_ = false;
  std::vector<char> mask_deferred_;        // [samples] of the current step
  std::vector<std::size_t> sampled_rows_;  // samples that reach the sampler, in order
  std::unique_ptr<grammar::MaskWorkers> mask_workers_;
};

}  // namespace vpod::engine
