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
#include "kernels/sampling/sampling.h"
#include "kvcache/paged_kv_cache.h"
#include "model/model.h"

namespace vpod::engine {

// Sees each step's logits before they are sampled (`vpod generate
// --dump-logits`): [num_sequences, vocab] fp32 on the backend's device;
// `samples` names the rows that are sampled (SampleSpec::sequence_index).
using LogitsObserver =
    std::function<Status(const TensorView& logits, std::span<const SampleSpec> samples)>;

class ModelRunner final : public ModelExecutor {
 public:
  // `kv_views`: one per layer, from the KV cache the scheduler allocates in.
  ModelRunner(model::Model& model, std::vector<KvLayerView> kv_views);
  // Over the paged baseline cache (`--kv-cache paged`): each step first
  // copies the block tables the scheduler's prepare() changed to the device.
  ModelRunner(model::Model& model, kvcache::PagedKvCache& paged_cache);

  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out) override;

  // Optional; called on the thread that runs forward().
  void set_logits_observer(LogitsObserver observer) { logits_observer_ = std::move(observer); }

 private:
  model::Model& model_;
  std::vector<KvLayerView> kv_views_;
  kvcache::PagedKvCache* paged_cache_ = nullptr;  // set: forward through block tables
  std::vector<PagedKvView> paged_views_;
  std::vector<kernels::SampleRequest> requests_;  // reused every step
  std::vector<kernels::SampleResult> results_;
  LogitsObserver logits_observer_;
};

}  // namespace vpod::engine
