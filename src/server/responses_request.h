// POST /v1/responses (OpenAI's Responses API), text and function tools: the
// request body parsed and validated into a chat request, so that the
// conversation is rendered and generated exactly as /v1/chat/completions
// does it.
//
//   input: "text" | [item], item one of
//     {type?: "message", role: user|assistant|system|developer,
//      content: "text" | [{type: input_text|output_text, text}]}
//       -> {role, content: "text" | [{type: "text", text}]}
//     {type: "function_call", call_id, name, arguments: "JSON", id?, status?}
//       -> {role: "assistant", content: "", tool_calls: [{id: call_id,
//           type: "function", function: {name, arguments}}]}, consecutive
//           calls (and an assistant message just before them) in one message
//     {type: "function_call_output", call_id, output: "text" | [input_text]}
//       -> {role: "tool", tool_call_id: call_id, content}
//   tools: [{type: "function", name, description?, parameters?, strict?}]
//     -> chat's [{type: "function", function: {name, ...}}]
//   tool_choice: "none" | "auto" | "required" | {type: "function", name}
//     -> chat's, the named one as {type: "function", function: {name}}
//   text.format: {type: "text" | "json_object"} | {type: "json_schema",
//     name, schema, description?, strict?}
//     -> chat's response_format (structured output), json_schema nested
//
// Sampling, tool and format fields are then validated by parse_chat_request
// (same rules, same generation-config defaults, tool_request.h,
// structured_output_parse.h). Fields that would change the meaning of the
// answer and that vpod does not implement (tools other than functions,
// reasoning, include, truncation "auto", background, text.verbosity other
// than "medium", ...) are a 400 naming the field, never silently ignored.
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
  // The function tools and tool_choice in the Responses shape, as the
  // response object echoes them: [{type, name, description, parameters,
  // strict}] (absent fields null) and "auto" | "none" | "required" |
  // {type: "function", name}. The chat shapes are in chat.tools.
  nlohmann::json tools_echo = nlohmann::json::array();
  nlohmann::json tool_choice_echo = "auto";
  // text.format as the response object echoes it ({type: "text"} unless given).
  nlohmann::json text_format_echo = {{"type", "text"}};
};

ApiResult<ResponsesRequest> parse_responses_request(std::string_view body,
                                                    const RequestLimits& limits);

}  // namespace vpod::server
