// What the HTTP server needs from the rest of vpod, as one narrow interface:
// the model's card, tokenization and chat templates, and generation as a
// stream of deltas that can be aborted. `EngineBackend` (engine_backend.h)
// implements it over the engine and the tokenizer; the server's own tests use
// a deterministic double, so the HTTP layer is tested without a model.
//
// Threading: every method may be called from any HTTP worker thread at once.
// A GenerationStream is used by one thread (its HTTP request's), but its
// `wake` callback is invoked on the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace vpod::server {

// GET /v1/models and the limits validation checks against.
struct ModelCard {
  std::string id;            // the served model name (`model` in requests must match it)
  std::string root;          // the model folder
  std::int64_t created = 0;  // unix seconds the server started
  int max_model_len = 0;     // prompt + generated tokens per request
  int vocab_size = 0;        // token ids must lie in [0, vocab_size)
};

// Sampling and stop rules of one sequence, already validated.
struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;
  int top_k = 0;  // 0 or -1: off
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<std::uint64_t> seed;
  int max_tokens = 16;
  int min_tokens = 0;
  std::vector<std::string> stop;
  std::vector<std::int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  // Unset: no logprobs; 0: the sampled token's only; N: plus the top N.
  std::optional<int> logprobs;
};

// One sequence to generate: a tokenized prompt and its options.
struct GenerationSpec {
  std::vector<std::int32_t> prompt_token_ids;
  SamplingOptions sampling;
};

enum class FinishReason { none, stop, length, abort, error };
// OpenAI's strings: "stop", "length", "abort", "error"; "" for none.
std::string_view finish_reason_name(FinishReason reason);

struct TopLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  std::int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // most likely first
};

// Everything a sequence produced since the previous pop.
struct GenerationDelta {
  std::vector<std::int32_t> token_ids;
  // Final text: never a broken UTF-8 sequence, stop strings already cut.
  // Because stop strings may be held back, text need not line up with tokens.
  std::string text;
  std::vector<TokenLogprobs> logprobs;  // parallel to token_ids when requested

  bool finished = false;
  FinishReason finish_reason = FinishReason::none;
  std::string stop_string;                 // the stop string that ended it, if any
  std::optional<std::int32_t> stop_token;  // the stop token (not EOS) that ended it, if any
  std::string error;                       // the reason when finish_reason == error

  // Running totals, valid in every delta.
  int num_prompt_tokens = 0;
  int num_generated_tokens = 0;

  // Appends a later delta of the same sequence.
  void merge(GenerationDelta&& next);
};

class GenerationStream {
 public:
  virtual ~GenerationStream() = default;
  // Moves everything produced since the last call into `out` (replacing its
  // contents); false when nothing new is there. Never blocks.
  virtual bool try_pop(GenerationDelta& out) = 0;
  // Cancels the sequence (idempotent). Its resources are freed at the next
  // engine step; the stream then ends with finish_reason abort.
  virtual void abort() = 0;
};

// Engine-wide numbers for /metrics that only the engine knows.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_cache_usage = 0.0;  // [0, 1]
  std::uint64_t num_preemptions = 0;
};

struct ChatMessage {
  std::string role;  // system, user, assistant, tool, developer
  std::string content;
  std::string name;  // optional participant name; "" when absent
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

class ServingBackend {
 public:
  virtual ~ServingBackend() = default;

  virtual const ModelCard& model() const = 0;
  // False while the model is still loading.
  virtual bool ready() const = 0;

  virtual Result<std::vector<std::int32_t>> tokenize(std::string_view text,
                                                     bool add_special_tokens) const = 0;
  virtual Result<std::string> detokenize(std::span<const std::int32_t> token_ids,
                                         bool skip_special_tokens) const = 0;
  // The raw bytes one token stands for (may be part of a UTF-8 character);
  // what logprobs report as the token.
  virtual std::string token_bytes(std::int32_t token) const = 0;
  // Renders the model's chat template; an error when it has none or the
  // template rejects the conversation.
  virtual Result<std::string> apply_chat_template(std::span<const ChatMessage> messages,
                                                  const ChatTemplateOptions& options) const = 0;

  // Queues one sequence. `wake` runs on the engine thread whenever the stream
  // has something new; it must be quick and must not call into the backend.
  virtual Result<std::unique_ptr<GenerationStream>> submit(GenerationSpec spec,
                                                           std::function<void()> wake) = 0;

  virtual EngineStats stats() const = 0;
};

}  // namespace vpod::server
