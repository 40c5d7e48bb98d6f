// A token with its logprobs, as the executor reports it: a sampled token, or
// a prompt token scored for prompt logprobs. Fixed size, so the step loop
// fills preallocated arrays of these without allocating.
#pragma once

#include <array>
#include <cstdint>

namespace vpod::engine {

// Largest top-N logprobs count a request may ask for (OpenAI's top_logprobs cap).
inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  std::int32_t token = 0;
  float logprob = 0.0f;  // log-probability of `token` (after temperature/penalties)
  // Prompt tokens only: 1 + the number of ids more likely than `token` (vLLM's
  // rank); 0 where unknown (sampled tokens).
  std::int32_t rank = 0;
  int num_top = 0;  // valid entries of `top`, most likely first
  std::array<TokenLogprob, kMaxTopLogprobs> top{};
  // Structured output: the request's matcher refused a token sampled before
  // this one; the engine fails the request.
  bool grammar_rejected = false;
  // Structured output: nothing was sampled; the decode row's mask was not
  // ready when the forward was done, so it sits the step out and reruns
  // the same decode next step (docs/structured_output.md).
  bool deferred = false;
};

}  // namespace vpod::engine
