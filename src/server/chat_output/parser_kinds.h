// The output parsers a server can be started with (vLLM's spellings):
// --tool-call-parser NAME and --reasoning-parser NAME.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vpod::server::chat_output {

enum class ToolParserKind {
  none,
  llama3_json,  // Llama 3.x/4 JSON calls, optionally after <|python_tag|>
  hermes,       // <tool_call>{...}</tool_call>: Hermes 2/3, Qwen2.5, Qwen3
  mistral,      // [TOOL_CALLS][{...}, ...]
};

enum class ReasoningParserKind {
  none,
  qwen3,  // <think>...</think>
};

// vLLM's names: llama3_json, llama4_json; hermes (also qwen, qwen2_5, qwen3,
// which vLLM users give for Qwen models that write Hermes calls); mistral.
// Nothing for an unknown name.
std::optional<ToolParserKind> tool_parser_from_name(std::string_view name);
std::optional<ReasoningParserKind> reasoning_parser_from_name(std::string_view name);
// The accepted names, for error messages ("hermes, llama3_json, ...").
std::string tool_parser_names();
std::string reasoning_parser_names();

}  // namespace vpod::server::chat_output
