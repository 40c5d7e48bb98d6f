#include "engine/model_runner.h"

#include <algorithm>

#include "common/check.h"

namespace vpod::engine {

ModelRunner::ModelRunner(model::Model& model, std::vector<KvLayerView> kv_views)
    : model_(model), kv_views_(std::move(kv_views)), workspace_(model.config().vocab_size) {
  VPOD_CHECK(static_cast<int>(kv_views_.size()) == model.config().num_layers);
  result_.top.reserve(kMaxTopLogprobs);
  if (model.backend().device() != Device::cpu) host_row_.resize(model.config().vocab_size);
}

Status ModelRunner::forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                            std::span<SampledToken> out) {
  VPOD_CHECK(samples.size() == out.size());
  VPOD_ASSIGN_OR_RETURN(TensorView logits, model_.forward(batch, kv_views_));
  const int vocab = model_.config().vocab_size;
  const bool on_host = model_.backend().device() == Device::cpu;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const SampleSpec& spec = samples[i];
    const float* row = static_cast<const float*>(logits.data()) +
                       static_cast<std::int64_t>(spec.sequence_index) * logits.stride(0);
    if (!on_host) {
      VPOD_RETURN_IF_ERROR(model_.backend().download(
          row, static_cast<std::size_t>(vocab) * sizeof(float), host_row_.data()));
      row = host_row_.data();
    }
    const SamplingParams& p = *spec.params;
    kernels::SamplingConfig config;
    config.temperature = p.temperature;
    config.top_k = p.top_k;
    config.top_p = p.top_p;
    config.min_p = p.min_p;
    config.repetition_penalty = p.repetition_penalty;
    config.presence_penalty = p.presence_penalty;
    config.frequency_penalty = p.frequency_penalty;
    config.seed = spec.seed;
    config.index = static_cast<std::uint64_t>(spec.output_index);
    config.num_top_logprobs = std::max(spec.num_logprobs, 0);
    kernels::sample(
        std::span<const float>(row, vocab), config, spec.token_ids.first(spec.num_prompt_tokens),
        spec.token_ids.subspan(spec.num_prompt_tokens), spec.suppressed_ids, workspace_, result_);
    const kernels::SampleResult& r = result_;
    SampledToken& s = out[i];
    s.token = r.token;
    s.logprob = r.logprob;
    s.num_top = static_cast<int>(std::min<std::size_t>(r.top.size(), kMaxTopLogprobs));
    for (int k = 0; k < s.num_top; ++k) s.top[k] = {r.top[k].token, r.top[k].logprob};
  }
  return {};
}

}  // namespace vpod::engine
