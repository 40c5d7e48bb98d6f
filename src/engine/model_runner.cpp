// The engine's ModelExecutor over the model runtime (see model_runner.h).
#include "engine/model_runner.h"

#include <algorithm>

#include "common/check.h"

namespace vpod::engine {

ModelRunner::ModelRunner(model::Model& model, const KvCacheView& kv) : model_(model), kv_(kv) {
  VPOD_CHECK(kv_.num_layers() == model.config().num_layers);
  const auto rows = static_cast<std::size_t>(model.options().max_num_sequences);
  requests_.reserve(rows);
  results_.resize(rows);
  for (auto& r : results_) r.top.reserve(kMaxTopLogprobs);
}

Result<TensorView> ModelRunner::forward_logits(const HybridBatch& batch,
                                               std::span<const SampleSpec> samples) {
  (void)samples;
  return model_.forward(batch, kv_, plan_);
}

Status ModelRunner::forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                            std::span<SampledToken> out) {
  VPOD_CHECK(samples.size() == out.size());
  VPOD_ASSIGN_OR_RETURN(TensorView logits, forward_logits(batch, samples));
  if (logits_observer_ && !samples.empty()) VPOD_RETURN_IF_ERROR(logits_observer_(logits, samples));
  VPOD_CHECK(samples.size() <= results_.size());
  requests_.clear();
  for (const SampleSpec& spec : samples) {
    const SamplingParams& p = *spec.params;
    kernels::SampleRequest& request = requests_.emplace_back();
    request.row = spec.sequence_index;
    kernels::SamplingConfig& config = request.config;
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
    request.prompt_ids = spec.token_ids.first(spec.num_prompt_tokens);
    request.output_ids = spec.token_ids.subspan(spec.num_prompt_tokens);
    request.suppressed_ids = spec.suppressed_ids;
    request.logit_bias = p.logit_bias;
  }
  const std::span<kernels::SampleResult> results(results_.data(), samples.size());
  VPOD_RETURN_IF_ERROR(model_.backend().sample(logits, requests_, results));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const kernels::SampleResult& r = results[i];
    SampledToken& s = out[i];
    s.token = r.token;
    s.logprob = r.logprob;
    s.num_top = static_cast<int>(std::min<std::size_t>(r.top.size(), kMaxTopLogprobs));
    for (int k = 0; k < s.num_top; ++k) s.top[k] = {r.top[k].token, r.top[k].logprob};
  }
  return {};
}

}  // namespace vpod::engine
