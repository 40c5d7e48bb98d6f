// OutputProcessor (output_processor.h): a sampled token through stop rules,
// detokenization, the stream delta and the per-token latency metrics.
#include "engine/output_processor.h"

#include <algorithm>
#include <chrono>

#include "common/check.h"
#include "common/clock.h"
#include "engine/text_decoder.h"
#include "grammar/grammar_state.h"

namespace vpod::engine {

OutputProcessor::OutputProcessor(EngineMetrics& metrics) : metrics_(metrics) {
  delta_.token_ids.reserve(1);
  delta_.logprobs.reserve(1);
}

// The request sampled one of its grammar's stop tokens (an EOS id, which the
// mask allows only once the output is complete): the grammar has ended, and
// so does the request, with "stop", also before min_tokens and with
// ignore_eos, since the grammar allows nothing after it. Decided from the
// token, not the matcher, which the model runner advances later.
bool OutputProcessor::ends_grammar(const Request& r) {
  if (r.grammar == nullptr || r.num_generated() == 0) return false;
  const std::vector<std::int32_t>& stops = r.grammar->matcher->stop_token_ids();
  return std::find(stops.begin(), stops.end(), r.token_ids.back()) != stops.end();
}

bool OutputProcessor::stops_by_token(const Request& r) {
  const std::int32_t token = r.token_ids.back();
  if (ends_grammar(r)) return true;
  const bool stops_armed = r.num_generated() >= r.stop.min_tokens;
  if (stops_armed && std::find(r.stop_ids.begin(), r.stop_ids.end(), token) != r.stop_ids.end())
    return true;
  return r.num_tokens() >= r.max_total_tokens;
}

bool OutputProcessor::on_token(Request& r, const SampledToken& sampled, Clock::time_point now) {
  const std::int32_t token = sampled.token;
  VPOD_CHECK(r.num_generated() >= 1 && r.token_ids.back() == token);

  // Per-token metrics.
  metrics_.generation_tokens.fetch_add(1, std::memory_order_relaxed);
  if (!r.first_token_time) {
    r.first_token_time = now;
    metrics_.time_to_first_token_s.observe(seconds_between(r.arrival_time, now));
    metrics_.prompt_tokens.fetch_add(r.num_prompt_tokens, std::memory_order_relaxed);
  } else {
    metrics_.inter_token_latency_s.observe(seconds_between(r.last_token_time, now));
  }
  r.last_token_time = now;

  delta_.clear();
  delta_.id = r.id;
  delta_.token_ids.push_back(token);
  if (r.sampling.logprobs) delta_.logprobs.push_back(sampled);
  // The request's buffer rides in the delta for this push (no copy here;
  // the stream's pending delta has the room reserved).
  const bool with_prompt_logprobs = r.sampling.prompt_logprobs && !r.prompt_logprobs_sent;
  if (with_prompt_logprobs) delta_.prompt_logprobs.swap(r.prompt_logprobs);

  const bool stops_armed = r.num_generated() >= r.stop.min_tokens;
  const bool is_stop_token =
      ends_grammar(r) ||
      (stops_armed && std::find(r.stop_ids.begin(), r.stop_ids.end(), token) != r.stop_ids.end());
  bool finished = false;
  bool cut = false;  // a stop string cut the text: nothing after it is decoded
  if (is_stop_token) {
    // The stop token's own text is output only on request (EOS is usually a
    // special token that skip_special_tokens drops anyway).
    if (r.stop.include_stop_str_in_output) r.decoder->append(token, r.text);
    delta_.stop_token = token;
    finished = true;
  } else {
    r.decoder->append(token, r.text);
    if (stops_armed && !r.stop_strings.empty()) {
      if (auto match = r.stop_strings.find(r.text, r.num_text_sent)) {
        const std::string& s = r.stop_strings[match->index];
        r.text.resize(match->pos + (r.stop.include_stop_str_in_output ? s.size() : 0));
        delta_.stop_string = s;
        finished = true;
        cut = true;
      }
    }
  }
  FinishReason reason = FinishReason::stop;
  if (!finished && r.num_tokens() >= r.max_total_tokens) {
    finished = true;
    reason = FinishReason::length;
  }

  if (finished) {
    if (!cut) r.decoder->finish(r.text);  // release any incomplete UTF-8 tail
    delta_.text.assign(r.text, r.num_text_sent);
    r.num_text_sent = r.text.size();
    finish(r, reason, now);
  } else {
    const std::size_t hold =
        r.stop_strings.holdback(std::string_view(r.text).substr(r.num_text_sent));
    const std::size_t sendable = r.text.size() - hold;
    delta_.text.assign(r.text, r.num_text_sent, sendable - r.num_text_sent);
    r.num_text_sent = sendable;
  }
  delta_.num_prompt_tokens = r.num_prompt_tokens;
  delta_.num_generated_tokens = r.num_generated();
  delta_.num_cached_tokens = r.num_cached_tokens;
  r.stream->push(delta_);
  if (with_prompt_logprobs) {
    delta_.prompt_logprobs.swap(r.prompt_logprobs);
    r.prompt_logprobs_sent = true;
  }
  return finished;
}

void OutputProcessor::on_prompt_scored(Request& r, Clock::time_point now) {
  VPOD_CHECK(r.score_only() && r.num_generated() == 0);
  delta_.clear();
  delta_.id = r.id;
  delta_.prompt_logprobs.swap(r.prompt_logprobs);
  r.last_token_time = now;
  finish(r, FinishReason::length, now);
  delta_.num_prompt_tokens = r.num_prompt_tokens;
  delta_.num_generated_tokens = 0;
  delta_.num_cached_tokens = r.num_cached_tokens;
  metrics_.prompt_tokens.fetch_add(r.num_prompt_tokens, std::memory_order_relaxed);
  r.stream->push(delta_);
  delta_.prompt_logprobs.swap(r.prompt_logprobs);
  r.prompt_logprobs_sent = true;
}

void OutputProcessor::finish(Request& r, FinishReason reason, Clock::time_point now) {
  r.state = RequestState::finished;
  r.finish_reason = reason;
  delta_.finished = true;
  delta_.finish_reason = reason;
  observe_end(r, reason, now);
}

void OutputProcessor::observe_end(const Request& r, FinishReason reason, Clock::time_point now) {
  metrics_.count_finished(reason);
  metrics_.e2e_request_latency_s.observe(seconds_between(r.arrival_time, now));
  metrics_.request_prompt_tokens.observe(r.num_prompt_tokens);
  metrics_.request_generation_tokens.observe(r.num_generated());
  metrics_.request_max_tokens.observe(r.stop.max_tokens);
  // The phases as vLLM times them, for requests that reached their first
  // token (one aborted before has no prefill, decode or inference time).
  if (!r.first_scheduled_time || !r.first_token_time) return;
  const Clock::time_point scheduled = *r.first_scheduled_time;
  const Clock::time_point first = *r.first_token_time;
  metrics_.request_inference_time_s.observe(seconds_between(scheduled, r.last_token_time));
  metrics_.request_prefill_time_s.observe(seconds_between(scheduled, first));
  metrics_.request_decode_time_s.observe(seconds_between(first, r.last_token_time));
  if (r.num_generated() > 1) {
    metrics_.time_per_output_token_s.observe(seconds_between(first, r.last_token_time) /
                                             (r.num_generated() - 1));
  }
}

void OutputProcessor::end(Request& r, FinishReason reason, std::string_view error,
                          Clock::time_point now) {
  VPOD_CHECK(reason == FinishReason::abort || reason == FinishReason::error);
  r.state = RequestState::aborted;
  r.finish_reason = reason;
  delta_.clear();
  delta_.id = r.id;
  delta_.finished = true;
  delta_.finish_reason = reason;
  delta_.error.assign(error);
  delta_.num_prompt_tokens = r.num_prompt_tokens;
  delta_.num_generated_tokens = r.num_generated();
  delta_.num_cached_tokens = r.num_cached_tokens;
  observe_end(r, reason, now);
  r.stream->push(delta_);
}

}  // namespace vpod::engine
