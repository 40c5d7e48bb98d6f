// The engine's ModelExecutor over the model runtime (see model_runner.h).
#include "engine/model_runner.h"

#include <algorithm>

#include "common/check.h"
#include "grammar/matcher.h"

namespace vpod::engine {

ModelRunner::ModelRunner(model::Model& model, const KvCacheView& kv) : model_(model), kv_(kv) {
  VPOD_CHECK(kv_.num_layers() == model.config().num_layers);
  const auto rows = static_cast<std::size_t>(model.options().max_num_sequences);
  requests_.reserve(rows);
  results_.resize(rows);
  for (auto& r : results_) r.top.reserve(kMaxTopLogprobs);
  mask_words_ = grammar::token_bitmask_words(model.config().vocab_size);
  mask_matchers_.reserve(rows);
  mask_rows_.reserve(rows);
}

namespace {

// A sampler result as the engine carries it (fixed size, top-N copied).
SampledToken to_sampled(std::int32_t token, float logprob, std::int32_t rank,
                        const std::vector<kernels::TokenLogprob>& top) {
  SampledToken s;
  s.token = token;
  s.logprob = logprob;
  s.rank = rank;
  s.num_top = static_cast<int>(std::min<std::size_t>(top.size(), kMaxTopLogprobs));
  for (int k = 0; k < s.num_top; ++k) s.top[k] = {top[k].token, top[k].logprob};
  return s;
}

// Whether every id `row` allows is in `ids`: then suppressing `ids` (stop
// ids before min_tokens) would leave nothing to sample, and the grammar's
// end wins (the row allows only its stop tokens: the output is complete).
bool allows_only(std::span<const std::uint32_t> row, std::span<const std::int32_t> ids) {
  for (std::size_t w = 0; w < row.size(); ++w) {
    for (std::uint32_t bits = row[w]; bits != 0; bits &= bits - 1) {
      const auto id =
          static_cast<std::int32_t>(w * 32 + static_cast<std::size_t>(__builtin_ctz(bits)));
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) return false;
    }
  }
  return true;
}

}  // namespace

// The bitmask of each constrained sample, from its matcher (which the engine
// thread advanced over the previous token before this step was launched).
// Called after the forward is issued: on the GPU this CPU work overlaps it.
Status ModelRunner::fill_token_masks(std::span<const SampleSpec> samples) {
  mask_matchers_.clear();
  mask_rows_.clear();
  for (std::size_t i = 0; i < samples.size(); ++i) {
    grammar::Matcher* m = samples[i].matcher;
    if (m == nullptr) continue;
    if (m->vocab_size() != model_.config().vocab_size)
      return internal_error("a grammar was compiled for another vocabulary size");
    if (masks_.empty()) masks_.resize(results_.size() * static_cast<std::size_t>(mask_words_));
    mask_matchers_.push_back(m);
    mask_rows_.push_back(masks_.data() + i * static_cast<std::size_t>(mask_words_));
  }
  if (mask_matchers_.empty()) return {};
  if (!mask_filler_)
    mask_filler_ =
        std::make_unique<grammar::BitmaskFiller>(grammar::BitmaskFiller::default_threads());
  return mask_filler_->fill(mask_matchers_, mask_rows_, mask_words_);
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
  VPOD_RETURN_IF_ERROR(fill_token_masks(samples));
  requests_.clear();
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const SampleSpec& spec = samples[i];
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
    if (spec.matcher != nullptr) {
      request.allowed_tokens = std::span<const std::uint32_t>(
          masks_.data() + i * static_cast<std::size_t>(mask_words_), mask_words_);
      if (!request.suppressed_ids.empty() &&
          allows_only(request.allowed_tokens, request.suppressed_ids))
        request.suppressed_ids = {};
    }
  }
  const std::span<kernels::SampleResult> results(results_.data(), samples.size());
  VPOD_RETURN_IF_ERROR(model_.backend().sample(logits, requests_, results));
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const kernels::SampleResult& r = results[i];
    out[i] = to_sampled(r.token, r.logprob, 0, r.top);
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
        scores.out[next++] = to_sampled(requests_[static_cast<std::size_t>(i)].config.score_token,
                                        r.score_logprob, r.score_rank, r.top);
      }
    }
  }
  return {};
}

}  // namespace vpod::engine
