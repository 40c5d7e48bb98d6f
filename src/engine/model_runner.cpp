// The engine's ModelExecutor over the model runtime (see model_runner.h).
#include "engine/model_runner.h"

#include <algorithm>

#include "common/check.h"
#include "grammar/grammar_state.h"

namespace vpod::engine {

ModelRunner::ModelRunner(model::Model& model, const KvCacheView& kv) : model_(model), kv_(kv) {
  VPOD_CHECK(kv_.num_layers() == model.config().num_layers);
  const auto rows = static_cast<std::size_t>(model.options().max_num_sequences);
  requests_.reserve(rows);
  results_.resize(rows);
  for (auto& r : results_) r.top.reserve(kMaxTopLogprobs);
  defer_unready_masks_ = model.backend().device() == Device::cuda;
  mask_deferred_.reserve(rows);
  sampled_rows_.reserve(rows);
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

// Called after the forward is issued: on the GPU the jobs run while it
// computes. A job in flight from an earlier step (a deferred row) is waited
// for, not restarted: its row reruns the same decode, so the mask it fills
// is the one this step needs.
Status ModelRunner::await_token_masks(const HybridBatch& batch,
                                      std::span<const SampleSpec> samples) {
  mask_deferred_.assign(samples.size(), 0);
  bool any = false;
  for (const SampleSpec& spec : samples) {
    if (spec.grammar == nullptr) continue;
    if (spec.grammar->matcher->vocab_size() != model_.config().vocab_size)
      return internal_error("a grammar was compiled for another vocabulary size");
    any = true;
  }
  if (!any) return {};
  if (!mask_workers_)
    mask_workers_ = std::make_unique<grammar::MaskWorkers>(grammar::MaskWorkers::default_threads());
  const auto num_prefills = static_cast<int>(batch.prefills.size());
  // Polling interval for "is the forward done" while jobs remain.
  constexpr std::chrono::microseconds kPoll{20};
  for (;;) {
    const std::uint64_t seen = mask_workers_->completions();
    int waiting = 0;
    bool waiting_prefill = false;
    for (const SampleSpec& spec : samples) {
      grammar::GrammarState* g = spec.grammar;
      if (g == nullptr) continue;
      if (!g->busy.load(std::memory_order_acquire)) {
        const auto outputs =
            spec.token_ids.subspan(static_cast<std::size_t>(spec.num_prompt_tokens));
        if (g->mask_for == static_cast<int>(outputs.size())) continue;  // ready
        mask_workers_->submit(*g, outputs);
      }
      ++waiting;
      if (spec.sequence_index < num_prefills) waiting_prefill = true;
    }
    if (waiting == 0) return {};
    // A prefill's first token always waits (its row cannot rerun cheaply);
    // decode rows stop waiting once the GPU has nothing left to hide them under.
    if (defer_unready_masks_ && !waiting_prefill && model_.backend().idle()) {
      // A job that finished since the count above has this step's mask;
      // anything else sits the step out.
      for (std::size_t i = 0; i < samples.size(); ++i) {
        const grammar::GrammarState* g = samples[i].grammar;
        if (g == nullptr) continue;
        const bool ready = !g->busy.load(std::memory_order_acquire) &&
                           g->mask_for == static_cast<int>(samples[i].token_ids.size()) -
                                              samples[i].num_prompt_tokens;
        if (!ready) mask_deferred_[i] = 1;
      }
      return {};
    }
    mask_workers_->wait_for_completion(seen, kPoll);
  }
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
  VPOD_RETURN_IF_ERROR(await_token_masks(batch, samples));
  requests_.clear();
  sampled_rows_.clear();
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const SampleSpec& spec = samples[i];
    if (mask_deferred_[i] != 0) {
      out[i] = SampledToken{};
      out[i].deferred = true;
      continue;
    }
    sampled_rows_.push_back(i);
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
    if (spec.grammar != nullptr) {
      request.allowed_tokens = spec.grammar->mask;
      if (!request.suppressed_ids.empty() &&
          allows_only(request.allowed_tokens, request.suppressed_ids))
        request.suppressed_ids = {};
    }
  }
  const std::span<kernels::SampleResult> results(results_.data(), requests_.size());
  if (!requests_.empty()) VPOD_RETURN_IF_ERROR(model_.backend().sample(logits, requests_, results));
  for (std::size_t k = 0; k < sampled_rows_.size(); ++k) {
    const std::size_t i = sampled_rows_[k];
    const kernels::SampleResult& r = results[k];
    out[i] = to_sampled(r.token, r.logprob, 0, r.top);
    out[i].grammar_rejected = samples[i].grammar != nullptr && samples[i].grammar->rejected;
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
