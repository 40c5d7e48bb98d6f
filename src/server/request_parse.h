// Parsing and strict validation of the OpenAI request bodies (and vLLM's
// extensions) into plain structs. Pure functions of the body and the limits:
// no tokenizer, no engine. What needs the tokenizer (the prompt length
// against --max-model-len, chat's default max_tokens) is checked later, in
// the handler.
//
// Rules, as OpenAI and vLLM apply them:
// - the body must be a JSON object (valid UTF-8, no lone surrogates);
// - unknown fields are ignored; a known field with the wrong type or out of
//   range is a 400 naming the field; `null` means "not given";
// - known features vpod does not implement (suffix, best_of > n, ...) are a
//   400 saying so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/constraint.h"
#include "server/api_error.h"
#include "server/backend.h"
#include "server/tool_request.h"

namespace vpod::server {

struct RequestLimits {
  int max_model_len = 0;   // max_tokens may not exceed it
  int vocab_size = 0;      // token ids in [0, vocab_size)
  int max_n = 128;         // choices per prompt
  int max_logprobs = 20;   // top logprobs per token
  int max_prompts = 1024;  // prompts in one completions request
  // Nesting deeper than this is refused before it reaches the JSON parser
  // (a 1 MB body of '[' would otherwise recurse deep into the DOM).
  int max_json_depth = 64;
  // Sampling fields a request leaves out take these values (ModelCard's).
  engine::SamplingParams sampling_defaults;
};

// The fields shared by both endpoints (besides the prompt).
struct OutputOptions {
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // stream_options.continuous_usage_stats (with include_usage, as in vLLM):
  // every chunk carries its choice's usage so far.
  bool continuous_usage = false;
  bool return_token_ids = false;  // vLLM: prompt_token_ids and per-choice token_ids
  // vLLM's prompt_logprobs: top-N per prompt position, reported in
  // choices[].prompt_logprobs (completions) or prompt_logprobs (chat).
  std::optional<int> prompt_logprobs;
};

struct Prompt {
  bool is_token_ids = false;
  std::string text;                     // when !is_token_ids
  std::vector<std::int32_t> token_ids;  // when is_token_ids
};

struct CompletionRequest {
  std::string model;  // "" when not given
  std::vector<Prompt> prompts;
  bool echo = false;
  // echo with logprobs: the choices' logprobs start with the prompt tokens'
  // (sampling.prompt_logprobs is set for them).
  bool echo_logprobs = false;
  bool add_special_tokens = true;
  engine::SamplingParams sampling;
  engine::StopParams stop;  // max_tokens defaults to 16 for completions
  OutputOptions output;
  std::string cache_salt;  // vLLM's prefix-cache salt; "" when not given
  // Structured output (response_format, structured_outputs, guided_*).
  grammar::Constraint constraint;
};

struct ChatRequest {
  std::string model;
  // Validated messages: {"role", "content" (a string or text parts), "name"?}.
  nlohmann::ordered_json messages;
  ChatTemplateOptions chat_template;
  bool add_special_tokens = false;  // the template already has BOS
  // Unset: as many as fit in --max-model-len after the prompt.
  std::optional<int> max_tokens;
  engine::SamplingParams sampling;
  engine::StopParams stop;  // stop.max_tokens is filled by the handler
  OutputOptions output;
  std::string cache_salt;  // vLLM's prefix-cache salt; "" when not given
  ToolRequest tools;       // tools, tool_choice, parallel_tool_calls (tool_request.h)
  // Structured output (response_format, structured_outputs, guided_*).
  grammar::Constraint constraint;
};

// POST /tokenize: a prompt, or messages rendered through the chat template.
struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;
  nlohmann::ordered_json messages;
  ChatTemplateOptions chat_template;
  bool add_special_tokens = true;  // default true for a prompt, false for messages
  bool return_token_strs = false;
};

// POST /detokenize
struct DetokenizeRequest {
  std::string model;
  std::vector<std::int32_t> tokens;
};

ApiResult<CompletionRequest> parse_completion_request(std::string_view body,
                                                      const RequestLimits& limits);
ApiResult<ChatRequest> parse_chat_request(std::string_view body, const RequestLimits& limits);
ApiResult<TokenizeRequest> parse_tokenize_request(std::string_view body,
                                                  const RequestLimits& limits);
ApiResult<DetokenizeRequest> parse_detokenize_request(std::string_view body,
                                                      const RequestLimits& limits);
// The body as a JSON object, with the checks every endpoint applies (valid
// UTF-8, nesting within limits.max_json_depth, an object), for endpoints that
// parse their own fields (responses_request.h).
ApiResult<nlohmann::ordered_json> parse_request_object(std::string_view body,
                                                       const RequestLimits& limits);

}  // namespace vpod::server
