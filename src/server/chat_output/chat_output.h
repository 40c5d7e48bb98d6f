// A chat choice's output as OpenAI reports it when the request has tools or
// the server a reasoning parser: the model's text split into reasoning
// (reasoning_content), content and tool calls. The reasoning parser runs
// first; the tool-call parser sees only what is left (the answer).
//
// Streamed: one ChatOutputParser per choice turns each piece of text into
// delta objects ({"content"}, {"reasoning_content"}, {"tool_calls": [...]})
// as OpenAI streams them: a call's first delta carries index, id, type and
// name with empty arguments; its argument text follows in later deltas.
// Non-streamed: parse_chat_message() gives the whole message.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_output/parser_kinds.h"
#include "server/chat_output/reasoning_parser.h"
#include "server/chat_output/tool_parser.h"

namespace vpod::server::chat_output {

enum class ToolMode {
  none,      // no parsing (no tools, or tool_choice none)
  parse,     // tool_choice auto: the model's own call syntax (parser)
  required,  // the constrained list of calls
  named,     // the constrained arguments of function_name
};

struct ChatOutputConfig {
  ReasoningParserKind reasoning = ReasoningParserKind::none;
  ToolMode tools = ToolMode::none;
  ToolParserKind parser = ToolParserKind::none;  // ToolMode::parse
  std::string function_name;                     // ToolMode::named
  bool parallel_tool_calls = true;               // false: only the first call is kept

  bool active() const { return reasoning != ReasoningParserKind::none || tools != ToolMode::none; }
};

// A fresh tool call id: "chatcmpl-tool-" and 32 hex digits (vLLM's), or 9
// letters and digits for Mistral (its chat template refuses other ids).
std::string make_tool_call_id(ToolParserKind parser);

class ChatOutputParser {
 public:
  explicit ChatOutputParser(const ChatOutputConfig& config);

  // The delta objects for this piece of text (none while it is held back).
  std::vector<nlohmann::json> feed(std::string_view text);
  // The text has ended: what was held back.
  std::vector<nlohmann::json> finish();

  bool tools_called() const { return !calls_.empty(); }
  // Whether the finish_reason "stop" becomes "tool_calls" (OpenAI: calls the
  // model chose to make; a named tool_choice stays "stop").
  bool reports_tool_calls() const { return tools_called() && config_.tools != ToolMode::named; }

  // Everything parsed so far, for a non-streamed message.
  struct Call {
    std::string id;
    std::string name;
    std::string arguments;
  };
  const std::vector<Call>& calls() const { return calls_; }
  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }
  // The text the tool parser saw (the answer), for a fallback to content.
  const std::string& answer() const { return answer_; }
  bool malformed() const;

 private:
  std::vector<nlohmann::json> process(std::string_view reasoning, std::string_view answer,
                                      bool last);

  ChatOutputConfig config_;
  std::unique_ptr<ThinkParser> think_;
  std::unique_ptr<ToolCallParser> tools_;
  std::vector<Call> calls_;
  std::string content_;
  std::string reasoning_;
  std::string answer_;
  std::string held_space_;  // trailing whitespace of the content (see process())
};

// The non-streamed message {"role", "content", "reasoning_content"?,
// "tool_calls"?} of a whole output; `tools_called` tells whether the finish
// reason "stop" becomes "tool_calls". Broken calls fall back to content.
nlohmann::json parse_chat_message(const ChatOutputConfig& config, std::string_view text,
                                  bool& tools_called);

}  // namespace vpod::server::chat_output
