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

Status ModelRunner::forward_logits(const HybridBatch& batch, const PromptScores& scores) {
  VPOD_RETURN_IF_ERROR(model_.forward(batch, kv_, plan_, logits_mode(scores)).status());
  return score_prompts(scores, /*read=*/false);
}

Status ModelRunner::forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                            std::span<SampledToken> out, const PromptScores& scores) {
  VPOD_CHECK(samples.size() == out.size());
  VPOD_ASSIGN_OR_RETURN(TensorView logits, model_.forward(batch, kv_, plan_, logits_mode(scores)));
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
  // After the sampler: row_logits reuses the logits buffer.
  return score_prompts(scores, /*read=*/true);
}

// Each spec's rows in slices of at most the logits buffer's rows: the LM head
// over the slice, then the sampler (greedy, no penalties: raw logprobs) reads
// each row's prompt-token logprob, rank and top-N.
Status ModelRunner::score_prompts(const PromptScores& scores, bool read) {
  const int max_slice =
      std::min(model_.options().max_logit_rows, static_cast<int>(results_.size()));
  std::size_t next = 0;
  for (const PromptScoreSpec& spec : scores.specs) {
    VPOD_CHECK(static_cast<int>(spec.targets.size()) == spec.num_rows);
    VPOD_CHECK(spec.num_top >= 0 && spec.num_top <= kMaxTopLogprobs);
    for (int begin = 0; begin < spec.num_rows; begin += max_slice) {
      const int n = std::min(max_slice, spec.num_rows - begin);
      VPOD_ASSIGN_OR_RETURN(TensorView logits, model_.row_logits(spec.first_row + begin, n));
      if (!read) continue;
      requests_.clear();
      for (int i = 0; i < n; ++i) {
        kernels::SampleRequest& request = requests_.emplace_back();
        request.row = i;
        request.config.temperature = 0.0f;
        request.config.num_top_logprobs = spec.num_top;
        request.config.score_token = spec.targets[static_cast<std::size_t>(begin + i)];
      }
      const std::span<kernels::SampleResult> results(results_.data(), static_cast<std::size_t>(n));
      VPOD_RETURN_IF_ERROR(model_.backend().sample(logits, requests_, results));
      VPOD_CHECK(next + static_cast<std::size_t>(n) <= scores.out.size());
      for (int i = 0; i < n; ++i) {
        const kernels::SampleResult& r = results[static_cast<std::size_t>(i)];
        SampledToken& s = scores.out[next++];
        s.token = requests_[static_cast<std::size_t>(i)].config.score_token;
        s.logprob = r.score_logprob;
        s.rank = r.score_rank;
        s.num_top = static_cast<int>(std::min<std::size_t>(r.top.size(), kMaxTopLogprobs));
        for (int k = 0; k < s.num_top; ++k) s.top[k] = {r.top[k].token, r.top[k].logprob};
      }
    }
  }
  return {};
}

}  // namespace vpod::engine
