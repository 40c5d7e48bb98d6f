// Requests (request.h): lifecycle states and the limits a request is
// validated against when it enters the engine.
#include "engine/request.h"

#include <cmath>
#include <string>

#include "common/splitmix64.h"
#include "engine/output_stream.h"
#include "engine/text_decoder.h"
#include "grammar/grammar_state.h"

namespace vpod::engine {

namespace {
// Bounds that keep one request's stop-string work per token small.
constexpr std::size_t kMaxStopStrings = 16;
constexpr std::size_t kMaxStopStringBytes = 1024;
// OpenAI's range for presence and frequency penalties.
constexpr float kMaxAbsPenalty = 2.0f;
}  // namespace

std::uint64_t hash_cache_salt(std::string_view cache_salt) {
  if (cache_salt.empty()) return 0;
  const std::uint64_t h = splitmix64_bytes(cache_salt);
  return h != 0 ? h : 1;
}

std::string_view request_state_name(RequestState state) {
  switch (state) {
    case RequestState::waiting: return "waiting";
    case RequestState::prefilling: return "prefilling";
    case RequestState::decoding: return "decoding";
    case RequestState::preempted: return "preempted";
    case RequestState::finished: return "finished";
    case RequestState::aborted: return "aborted";
  }
  return "unknown";
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none: return "";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::error: return "error";
  }
  return "";
}

Status validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
    return invalid_argument("temperature must be a finite number >= 0, got " +
                            std::to_string(p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return invalid_argument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  if (p.top_k < -1)
    return invalid_argument("top_k must be -1, 0 (disabled) or >= 1, got " +
                            std::to_string(p.top_k));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return invalid_argument("min_p must be in [0, 1], got " + std::to_string(p.min_p));
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f)
    return invalid_argument("repetition_penalty must be > 0, got " +
                            std::to_string(p.repetition_penalty));
  if (!(std::fabs(p.presence_penalty) <= kMaxAbsPenalty))
    return invalid_argument("presence_penalty must be in [-2, 2], got " +
                            std::to_string(p.presence_penalty));
  if (!(std::fabs(p.frequency_penalty) <= kMaxAbsPenalty))
    return invalid_argument("frequency_penalty must be in [-2, 2], got " +
                            std::to_string(p.frequency_penalty));
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > kMaxTopLogprobs))
    return invalid_argument("logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) +
                            "], got " + std::to_string(*p.logprobs));
  if (p.prompt_logprobs && (*p.prompt_logprobs < 0 || *p.prompt_logprobs > kMaxTopLogprobs))
    return invalid_argument("prompt_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) +
                            "], got " + std::to_string(*p.prompt_logprobs));
  if (p.logit_bias.size() > static_cast<std::size_t>(kMaxLogitBiasEntries))
    return invalid_argument("logit_bias may hold at most " + std::to_string(kMaxLogitBiasEntries) +
                            " entries, got " + std::to_string(p.logit_bias.size()));
  for (const kernels::LogitBias& b : p.logit_bias) {
    if (b.token < 0)
      return invalid_argument("logit_bias token id must be >= 0, got " + std::to_string(b.token));
    if (!(std::fabs(b.bias) <= kMaxAbsLogitBias))
      return invalid_argument("logit_bias of token " + std::to_string(b.token) +
                              " must be in [-100, 100], got " + std::to_string(b.bias));
  }
  // Unique ids: the samplers add each entry once (a few hundred at most).
  for (std::size_t i = 0; i < p.logit_bias.size(); ++i) {
    for (std::size_t j = i + 1; j < p.logit_bias.size(); ++j) {
      if (p.logit_bias[i].token == p.logit_bias[j].token)
        return invalid_argument("logit_bias lists token " + std::to_string(p.logit_bias[i].token) +
                                " twice");
    }
  }
  return {};
}

Status validate(const StopParams& p) {
  if (p.max_tokens < 0)
    return invalid_argument("max_tokens must be >= 1, got " + std::to_string(p.max_tokens));
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens)
    return invalid_argument("min_tokens must be in [0, max_tokens], got " +
                            std::to_string(p.min_tokens));
  if (p.stop.size() > kMaxStopStrings)
    return invalid_argument("at most " + std::to_string(kMaxStopStrings) +
                            " stop strings are allowed");
  for (const std::string& s : p.stop) {
    if (s.empty()) return invalid_argument("stop strings must not be empty");
    if (s.size() > kMaxStopStringBytes)
      return invalid_argument("stop strings must be at most " +
                              std::to_string(kMaxStopStringBytes) + " bytes");
  }
  for (std::int32_t id : p.stop_token_ids)
    if (id < 0) return invalid_argument("stop_token_ids must be >= 0, got " + std::to_string(id));
  return {};
}

Request::Request() = default;
Request::~Request() = default;

}  // namespace vpod::engine
