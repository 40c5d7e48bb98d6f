// The OpenAI streaming protocol from the client's side: request bodies for
// /v1/completions and /v1/chat/completions, and the parse of one streamed
// event's data (a JSON chunk, an error, or the final "[DONE]").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace vpod::bench::serve {

enum class Endpoint {
  completions,  // POST /v1/completions, the prompt sent as token ids
  chat,         // POST /v1/chat/completions, the prompt as one user message
};

// One message of a chat conversation: role "system", "user" or "assistant".
struct ChatMessage {
  std::string role;
  std::string content;
};

struct StreamRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;
  std::span<const std::int32_t> prompt_ids;  // completions
  std::string_view prompt_text;              // chat, when `messages` is empty
  std::span<const ChatMessage> messages;     // chat: the whole conversation, when non-empty
  int max_tokens = 16;
  // vLLM's extension: generate exactly max_tokens, whatever the model samples.
  bool ignore_eos = true;
  float temperature = 0.0f;
};

// The JSON body: stream with stream_options.include_usage, so the last chunk
// carries exact token counts.
std::string stream_request_body(const StreamRequest& request);

struct StreamChunk {
  bool done = false;                     // the "[DONE]" sentinel
  bool has_choices = false;              // a non-empty `choices` array: counts for TTFT/ITL
  std::string text;                      // choices[0].text, or choices[0].delta.content (chat)
  std::optional<int> prompt_tokens;      // usage, when the chunk carries it
  std::optional<int> completion_tokens;  // usage, when the chunk carries it
  // usage.prompt_tokens_details.cached_tokens (OpenAI's name): prompt tokens
  // the server took from its prefix cache instead of computing them.
  std::optional<int> cached_tokens;
  std::optional<std::string> error;  // an {"error": ...} event
};

// Parses one event's data. Malformed JSON is an error (a broken server).
Result<StreamChunk> parse_stream_chunk(std::string_view data, Endpoint endpoint);

}  // namespace vpod::bench::serve
