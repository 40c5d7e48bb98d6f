// ModelExecutor over the model runtime (src/model): one forward over the
// hybrid batch, then one sample per sequence that completes its tokens.
//
// Sampling goes through the backend in one call per step (Backend::sample:
// penalties, temperature, top-k/p, min-p, seeded Gumbel-max, logprobs with
// kernels::sample's semantics): on the CPU backend kernels::sample per row,
// on CUDA the GPU sampler, so only token ids and logprobs cross PCIe.
#pragma once

#include <span>
#include <vector>

#include "common/kv_view.h"
#include "engine/model_executor.h"
#include "kernels/sampling/sampling.h"
#include "model/model.h"

namespace vpod::engine {

class ModelRunner final : public ModelExecutor {
 public:
  // `kv`: every layer of the KV cache the scheduler allocates in
  // (kvcache::KvStore::view(): vAttention or the paged baseline, whose
  // prepare path has put the step's block tables where the kernels read
  // them). Its entries must outlive the runner.
  ModelRunner(model::Model& model, const KvCacheView& kv);

  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out) override;

 private:
  model::Model& model_;
  KvCacheView kv_;
  model::StepPlan plan_;  // the step's attention plan; its buffers are reused every step
  std::vector<kernels::SampleRequest> requests_;  // reused every step
  std::vector<kernels::SampleResult> results_;
};

}  // namespace vpod::engine
