// ModelExecutor over the model runtime (src/model): one forward over the
// hybrid batch, then one sample per sequence that completes its tokens.
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
                 std::span<SampledToken> out) override;

  // Optional; called on the thread that runs forward().
  void set_logits_observer(LogitsObserver observer) { logits_observer_ = std::move(observer); }

 private:
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
