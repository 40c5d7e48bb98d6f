// ModelExecutor over the model runtime (src/model): one forward over the
// hybrid batch, then one sample per sequence that completes its tokens.
//
// Sampling uses kernels::sample on the host rows of the logits (penalties,
// temperature, top-k/p, min-p, seeded Gumbel-max, logprobs; allocation-free
// with a workspace sized once). On the CPU backend the rows are read in place; on
// CUDA each sampled row is copied to the host first, which costs a PCIe copy
// of vocab floats per row - the GPU sampler replaces that when it lands.
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
  // `kv_views`: one per layer, from the KV cache the scheduler allocates in.
  ModelRunner(model::Model& model, std::vector<KvLayerView> kv_views);

  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out) override;

 private:
  model::Model& model_;
  std::vector<KvLayerView> kv_views_;
  std::vector<float> host_row_;  // [vocab] one downloaded logit row (CUDA)
  kernels::SamplingWorkspace workspace_;
  kernels::SampleResult result_;
};

}  // namespace vpod::engine
