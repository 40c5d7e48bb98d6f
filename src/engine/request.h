// A generation request inside the engine: what the client asked for
// (sampling parameters, stop rules) and where it is in its lifecycle.
//
// Lifecycle (RequestState):
//
//   waiting --admit--> prefilling --last chunk sampled--> decoding --stop rule--> finished
//      ^                   |                                  |
//      |                   +------------ preempt -------------+--> preempted (re-queued at
//      +------------------------------ readmit -------------------  the head of the queue)
//   any state --abort (client gone, engine error)--> aborted
//
// Preemption is by recomputation: the KV slot is freed, the generated tokens
// are kept, and on readmission prompt + generated tokens are prefilled again.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "engine/stop_strings.h"
#include "engine/token_logprobs.h"
#include "grammar/constraint.h"
#include "kernels/sampling/sampling.h"

namespace vpod::grammar {
struct GrammarState;
}

namespace vpod::engine {

using RequestId = std::uint64_t;

enum class RequestState {
  waiting,     // queued, never admitted
  prefilling,  // admitted; prompt (or prompt + outputs after preemption) partly in the KV cache
  decoding,    // every known token is in the KV cache but the newest sampled one
  preempted,   // evicted from the KV cache; queued at the head, will recompute
  finished,    // a stop rule ended it (finish_reason says which)
  aborted,     // cancelled (client disconnect, shutdown) or failed (engine error)
};

enum class FinishReason {
  none,    // not finished
  stop,    // EOS, a stop token id or a stop string
  length,  // max_tokens or the model's context length
  abort,   // cancelled by the client or at shutdown
  error,   // the engine failed to run the step (the stream carries the message)
};

std::string_view request_state_name(RequestState state);
// OpenAI's finish_reason strings: "stop", "length", "abort", "error"; "" for none.
std::string_view finish_reason_name(FinishReason reason);

// Logit bias: at most this many entries per request (vLLM caps them too; the
// sampler walks them every step), each bias in [-kMaxAbsLogitBias, kMaxAbsLogitBias].
inline constexpr int kMaxLogitBiasEntries = 300;
inline constexpr float kMaxAbsLogitBias = 100.0f;

struct SamplingParams {
  float temperature = 1.0f;         // 0 selects greedy decoding
  float top_p = 1.0f;               // (0, 1]
  int top_k = 0;                    // 0 (or -1) disables
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 disables (prompt and output tokens)
  float presence_penalty = 0.0f;    // [-2, 2] (output tokens)
  float frequency_penalty = 0.0f;   // [-2, 2] (output tokens)
  // Reproducible sampling: the same seed gives the same tokens, also across
  // preemption. Unset: the engine draws one at submission.
  std::optional<std::uint64_t> seed;
  // Unset: no logprobs. 0: the sampled token's logprob only. N: plus the top N.
  std::optional<int> logprobs;
  // Prompt logprobs (vLLM's prompt_logprobs; completions' echo + logprobs):
  // unset none; 0 each prompt token's logprob (from the second on) and rank;
  // N plus the top N. Raw logprobs of the model (no penalties, no bias). Such
  // a request computes its whole prompt (no prefix-cache hit), so every
  // position is scored.
  std::optional<int> prompt_logprobs;
  // OpenAI's logit_bias: added to the logits before penalties, logprobs and
  // the draw (also greedy). Unique token ids; allocated at submission, the
  // sampler reads it in place every step.
  std::vector<kernels::LogitBias> logit_bias;

  bool greedy() const { return temperature == 0.0f; }
};

struct StopParams {
  // >= 1; also capped by the model's context length. 0 only with prompt
  // logprobs: the prompt is scored and nothing is generated (finish_reason
  // length).
  int max_tokens = 16;
  int min_tokens = 0;  // EOS, stop ids and stop strings are ignored before this many tokens
  std::vector<std::string> stop;             // stop strings (may straddle tokens)
  std::vector<std::int32_t> stop_token_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
};

// Checks ranges; the message names the field (the server turns it into a 400).
Status validate(const SamplingParams& params);
Status validate(const StopParams& params);

// What a client submits. n > 1 is handled by the server as n requests.
struct RequestSpec {
  std::vector<std::int32_t> prompt_token_ids;
  SamplingParams sampling;
  StopParams stop;
  // vLLM's cache_salt: requests reuse each other's cached prompt K/V only
  // when their salts are equal (tenant isolation). "": the default tenant.
  std::string cache_salt;
  // Structured output: what the output must match (none: unconstrained).
  // Compiled at submission, on the submitting thread.
  grammar::Constraint constraint;
};

// The 64-bit salt prefix caching keys a request's blocks under: 0 for "",
// never 0 otherwise.
std::uint64_t hash_cache_salt(std::string_view cache_salt);

class RequestStream;
class IncrementalDecoder;

// Engine-internal state of one request. Owned by the engine; touched only by
// the engine thread after submission.
struct Request {
  RequestId id = 0;
  std::uint64_t arrival_seq = 0;  // submission order: FCFS and the preemption victim
  RequestState state = RequestState::waiting;
  FinishReason finish_reason = FinishReason::none;

  SamplingParams sampling;
  StopParams stop;
  std::uint64_t seed = 0;  // sampling.seed or the engine's draw
  // Token ids that end the request: the model's EOS ids (unless ignore_eos)
  // and stop_token_ids. Suppressed in sampling before min_tokens.
  std::vector<std::int32_t> stop_ids;
  StopStringMatcher stop_strings;  // built from stop.stop
  // Structured output: the grammar over the generated tokens (null:
  // unconstrained). Only the model runner and its mask threads touch it: at
  // each step that samples the request they accept the outputs the matcher
  // has not seen, then fill the next token's bitmask, while the GPU
  // computes. Shared with a job in flight, which may outlive the request.
  // Preemption keeps it.
  std::shared_ptr<grammar::GrammarState> grammar;

  // prompt ++ generated; reserved at submission for prompt + max_tokens so the
  // step loop never reallocates it.
  std::vector<std::int32_t> token_ids;
  int num_prompt_tokens = 0;
  int max_total_tokens = 0;  // min(prompt + max_tokens, max_model_len)

  // KV state. num_computed tokens of token_ids are in the cache; a decode
  // computes token_ids[num_computed] and samples the next token.
  int slot = -1;
  int num_computed = 0;
  int num_preemptions = 0;
  // Prefix caching: the salt admission looks cached blocks up under
  // (hash_cache_salt), and the prompt tokens the cache held at the first
  // admission (usage's cached_tokens; a readmission after preemption may hit
  // more, even its own blocks, and does not change it).
  std::uint64_t cache_salt = 0;
  int num_cached_tokens = 0;

  // Prompt logprobs (sampling.prompt_logprobs): entry i is prompt token i+1's,
  // filled as prefill chunks are collected (reserved at submission), sent
  // with the first delta.
  std::vector<SampledToken> prompt_logprobs;
  bool prompt_logprobs_sent = false;

  // Output side: text made final by the detokenizer, and how much of it has
  // been streamed (the rest may be the start of a stop string, held back).
  std::unique_ptr<IncrementalDecoder> decoder;
  std::string text;
  std::size_t num_text_sent = 0;
  std::shared_ptr<RequestStream> stream;

  // Timestamps for metrics.
  Clock::time_point arrival_time;
  std::optional<Clock::time_point> first_scheduled_time;
  std::optional<Clock::time_point> first_token_time;
  Clock::time_point last_token_time;

  // Intrusive links of the waiting queue (RequestQueue): no allocation per push.
  Request* queue_prev = nullptr;
  Request* queue_next = nullptr;
  bool queued = false;

  Request();
  ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_generated() const { return num_tokens() - num_prompt_tokens; }
  // Tokens the cache still lacks before this request can sample again.
  int num_uncomputed() const { return num_tokens() - num_computed; }
  bool is_running() const {
    return state == RequestState::prefilling || state == RequestState::decoding;
  }
  bool is_done() const { return state == RequestState::finished || state == RequestState::aborted; }
  // Prompt positions whose next token still needs its logprob: [begin, end).
  int num_prompt_scored() const { return static_cast<int>(prompt_logprobs.size()); }
  // A max_tokens 0 request: scores its prompt, generates nothing.
  bool score_only() const { return stop.max_tokens == 0; }
};

}  // namespace vpod::engine
