// POST /v1/responses (OpenAI's Responses API), text in and out: the request
// body parsed and validated into a chat request, so that the conversation is
// rendered and generated exactly as /v1/chat/completions does it.
//
//   input: "text" | [{type?: "message", role: user|assistant|system|developer,
//                     content: "text" | [{type: input_text|output_text, text}]}]
//   -> chat messages [{role, content: "text" | [{type: "text", text}]}]
//
// Sampling fields are validated by parse_chat_request (same rules, same
// generation-config defaults). Fields that would change the meaning of the
// answer and that vpod does not implement (tools, text.format other than
// text, reasoning, include, truncation "auto", background, ...) are a 400
// naming the field, never silently ignored.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/request_parse.h"

namespace vpod::server {

struct ResponsesRequest {
  // messages = the input only; the handler puts instructions and the
  // previous response's conversation before it. stop.max_tokens is filled
  // by the handler; output.stream is `stream`.
  ChatRequest chat;
  std::optional<std::string> instructions;
  std::optional<std::string> previous_response_id;
  std::optional<int> max_output_tokens;
  bool store = true;
  nlohmann::json metadata = nlohmann::json::object();  // string -> string, echoed
  std::optional<std::string> user;
};

ApiResult<ResponsesRequest> parse_responses_request(std::string_view body,
                                                    const RequestLimits& limits);

}  // namespace vpod::server
