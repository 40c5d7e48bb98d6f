// OpenAI response bodies: completions and chat completions, whole or as SSE
// chunks, with their logprobs shapes, usage, and the models list.
//
// Streaming (per choice, interleaved across choices as deltas arrive):
//   content chunks (chat: the first carries role "assistant" with the first text)
//   -> a final chunk with an empty delta and finish_reason
//   then, once every choice is done: a usage chunk with empty choices (when
//   stream_options.include_usage) -> "data: [DONE]". With
//   continuous_usage_stats, every chunk before it also carries `usage`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/chat_output/chat_output.h"

namespace vpod::server {

enum class Endpoint { completions, chat };

struct ResponseOptions {
  Endpoint endpoint = Endpoint::completions;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  std::int64_t created = 0;
  std::string model;
  int n = 1;  // choices per prompt; choice index = prompt index * n + i
  bool stream = false;
  bool include_usage = false;
  // Every content and final chunk carries `usage`: its choice's prompt
  // tokens and the tokens generated so far (vLLM's continuous_usage_stats).
  bool continuous_usage = false;
  bool return_token_ids = false;
  bool logprobs = false;  // report logprobs (the engine was asked for them)
  // Completions' echo with logprobs: each choice's logprobs start with its
  // prompt's tokens (the first with null logprobs), top-N as for the output.
  bool echo_logprobs = false;
  int logprobs_top = 0;  // the request's top-N for logprobs (completions' echoed prompt)
  // vLLM's prompt_logprobs (non-streamed): per position null (the first) or
  // {token id: {logprob, rank, decoded_token}} with the prompt token and the
  // top N; in each choice (completions) or the body (chat).
  std::optional<int> prompt_logprobs;
  // The request's stop_token_ids: a stop on one of them is reported as
  // stop_reason (an EOS stop is not, as in vLLM).
  std::vector<std::int32_t> stop_token_ids;
  // Chat: reasoning and tool calls parsed out of the text (chat_output.h).
  chat_output::ChatOutputConfig chat_output;
};

// The raw bytes a token stands for (ServingBackend::token_bytes).
using TokenBytesFn = std::function<std::string(std::int32_t)>;

// What a connection drives a generation through (http_session.cpp): one per
// request, fed every delta; the chat/completions builder below and the
// Responses API's (responses_json.h) implement it.
class OutputBuilder {
 public:
  virtual ~OutputBuilder() = default;
  // Streaming: the SSE events for this delta of sequence `choice` ("" when
  // there is nothing to send). `delta` may be modified.
  virtual std::string add(int choice, engine::RequestOutput& delta) = 0;
  virtual bool all_finished() const = 0;
  // Streaming: what follows the last delta.
  virtual std::string stream_tail() const = 0;
  // Non-streaming body; requires all_finished() and no error.
  virtual nlohmann::json response() const = 0;
  // The first engine error a sequence ended with (a 500 when not streamed).
  virtual const std::optional<ApiError>& error() const = 0;
  virtual int prompt_tokens() const = 0;
  virtual int completion_tokens() const = 0;
};

// Accumulates one request's deltas into OpenAI JSON. In streaming mode add()
// returns the SSE events to send; otherwise response() builds the body once
// every choice has finished. Not thread-safe: one HTTP request's thread owns it.
class ResponseBuilder final : public OutputBuilder {
 public:
  // `prompts`: each prompt's token ids; `echo_texts`: per prompt, the text to
  // prepend to its choices (completions' echo), or empty.
  ResponseBuilder(ResponseOptions options, TokenBytesFn token_bytes,
                  std::vector<std::vector<std::int32_t>> prompts,
                  std::vector<std::string> echo_texts = {});

  int num_choices() const { return static_cast<int>(choices_.size()); }
  // Streaming: the SSE events for this delta ("" when it carries nothing to send).
  // `delta` may be modified (echo text is prepended to a choice's first).
  std::string add(int choice, engine::RequestOutput& delta) override;
  bool all_finished() const override { return num_finished_ == num_choices(); }

  // Streaming: the usage chunk (if asked for) and data: [DONE].
  std::string stream_tail() const override;
  // Non-streaming body; requires all_finished() and no error.
  nlohmann::json response() const override;
  // The first engine error a choice ended with (a 500 for non-streamed requests).
  const std::optional<ApiError>& error() const override { return error_; }

  int prompt_tokens() const override { return prompt_tokens_; }
  int completion_tokens() const override;
  // usage.prompt_tokens_details.cached_tokens: per prompt, its first choice's.
  int cached_tokens() const;

 private:
  struct Choice {
    int prompt_index = 0;
    bool started = false;  // a chunk was sent (chat: the role went out)
    bool finished = false;
    engine::FinishReason finish_reason = engine::FinishReason::none;
    nlohmann::json stop_reason;  // string, token id or null
    int num_generated = 0;
    int num_cached = 0;                   // prompt tokens the prefix cache held at admission
    std::size_t text_offset = 0;          // completions logprobs: code points so far
    std::string text;                     // non-streaming only
    std::vector<std::int32_t> token_ids;  // non-streaming only
    nlohmann::json logprobs;              // non-streaming only; null until the first
    nlohmann::json prompt_logprobs;       // non-streaming only (vLLM's prompt_logprobs)
    // Streamed chat with tools or a reasoning parser: splits the text.
    std::unique_ptr<chat_output::ChatOutputParser> parser;
    bool tool_calls = false;  // finish_reason "stop" is reported as "tool_calls"
  };

  nlohmann::json chunk_header() const;
  nlohmann::json logprobs_json(Choice& choice, const std::vector<engine::SampledToken>& logprobs);
  nlohmann::json stop_reason_json(const engine::RequestOutput& delta) const;
  void append_logprobs(nlohmann::json& into, nlohmann::json&& more) const;
  // The delta's logprobs JSON; a choice's first delta starts with the
  // prompt's under echo_logprobs.
  nlohmann::json delta_logprobs(Choice& choice, const engine::RequestOutput& delta);
  // vLLM's prompt_logprobs list of a choice's prompt.
  nlohmann::json prompt_logprobs_json(const Choice& choice,
                                      const std::vector<engine::SampledToken>& scored) const;
  std::string stream_content(int index, Choice& choice, engine::RequestOutput& delta);
  std::string stream_parsed(int index, Choice& choice, engine::RequestOutput& delta);
  nlohmann::json finish_json(const Choice& choice) const;
  std::string stream_final(int index, const Choice& choice) const;
  nlohmann::json usage() const;
  nlohmann::json choice_usage(const Choice& choice) const;

  ResponseOptions options_;
  TokenBytesFn token_bytes_;
  std::vector<std::vector<std::int32_t>> prompts_;
  std::vector<std::string> echo_texts_;
  std::vector<Choice> choices_;
  int num_finished_ = 0;
  int prompt_tokens_ = 0;
  std::optional<ApiError> error_;
};

// GET /v1/models
nlohmann::json models_response(const ModelCard& card);

// Compact JSON that never throws on invalid UTF-8 (it is replaced).
std::string dump_json(const nlohmann::json& value);
// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& value);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Logprobs are finite in JSON: -inf (a masked token) is reported as this, as vLLM does.
inline constexpr float kMinReportedLogprob = -9999.0f;

}  // namespace vpod::server
