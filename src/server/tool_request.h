// Tool calling on the request side: OpenAI's `tools`, `tool_choice` and
// `parallel_tool_calls` validated (a 400 naming the field), the output
// parsing a request gets, and the structured-output constraint that enforces
// a required or named tool_choice (the JSON schemas vLLM builds).
//
// As in vLLM: tools without tool_choice mean "auto"; "auto" needs the server
// started with --enable-auto-tool-choice and --tool-call-parser; "none"
// renders the tools but parses nothing; "required" with no tools is "none".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "grammar/constraint.h"
#include "server/api_error.h"
#include "server/chat_output/chat_output.h"

namespace vpod::server {

enum class ToolChoice { none, automatic, required, named };

struct ToolRequest {
  // The tools as the request gave them (validated), for the chat template;
  // null when there are none.
  nlohmann::ordered_json tools;
  ToolChoice choice = ToolChoice::none;
  std::string function_name;  // ToolChoice::named
  bool parallel_tool_calls = true;
  bool choice_given = false;  // tool_choice was in the request (else implied by tools)
};

// What `vpod serve` was started with (--enable-auto-tool-choice,
// --tool-call-parser, --reasoning-parser).
struct ToolServing {
  bool enable_auto_tool_choice = false;
  chat_output::ToolParserKind tool_parser = chat_output::ToolParserKind::none;
  chat_output::ReasoningParserKind reasoning_parser = chat_output::ReasoningParserKind::none;
};

// Reads tools, tool_choice and parallel_tool_calls of a chat request body.
ApiResult<ToolRequest> parse_tool_request(const nlohmann::ordered_json& body);

// How the request's output is parsed; a 400 for "auto" on a server without
// a tool-call parser.
ApiResult<chat_output::ChatOutputConfig> chat_output_config(const ToolRequest& request,
                                                            const ToolServing& serving);

// What a parser needs from generation: Hermes and Mistral tags are special
// tokens in some tokenizers, so they must not be skipped (vLLM does the same).
void adjust_stop_params(const chat_output::ChatOutputConfig& config, engine::StopParams& stop);

// The constraint a required or named tool_choice is enforced with: a named
// function's parameters schema; for required, an array (at least one item;
// at most one without parallel_tool_calls) of {"name": one of the tools,
// "parameters": its schema}, with the tools' $defs hoisted to the root. Kind
// none otherwise; a 400 when two tools define one $defs name differently.
ApiResult<grammar::Constraint> tool_constraint(const ToolRequest& request);

}  // namespace vpod::server
