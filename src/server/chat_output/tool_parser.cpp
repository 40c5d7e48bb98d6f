// Parser names and the helpers every tool-call parser shares (tool_parser.h,
// parser_kinds.h).
#include "server/chat_output/tool_parser.h"

#include <algorithm>

namespace vpod::server::chat_output {
namespace {

struct ToolParserName {
  std::string_view name;
  ToolParserKind kind;
};
constexpr ToolParserName kToolParsers[] = {
    {"hermes", ToolParserKind::hermes},
    {"llama3_json", ToolParserKind::llama3_json},
    {"llama4_json", ToolParserKind::llama3_json},
    {"mistral", ToolParserKind::mistral},
    {"qwen", ToolParserKind::hermes},
    {"qwen2_5", ToolParserKind::hermes},
    {"qwen3", ToolParserKind::hermes},
};

}  // namespace

std::optional<ToolParserKind> tool_parser_from_name(std::string_view name) {
  for (const ToolParserName& p : kToolParsers) {
    if (p.name == name) return p.kind;
  }
  return std::nullopt;
}

std::optional<ReasoningParserKind> reasoning_parser_from_name(std::string_view name) {
  if (name == "qwen3") return ReasoningParserKind::qwen3;
  return std::nullopt;
}

std::string tool_parser_names() {
  std::string names;
  for (const ToolParserName& p : kToolParsers) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

std::string reasoning_parser_names() { return "qwen3"; }

std::unique_ptr<ToolCallParser> make_tool_parser(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::hermes: return make_hermes_parser();
    case ToolParserKind::llama3_json: return make_llama3_json_parser();
    case ToolParserKind::mistral: return make_mistral_parser();
    case ToolParserKind::none: break;
  }
  return nullptr;
}

std::size_t partial_tag_length(std::string_view text, std::string_view tag) {
  const std::size_t longest = std::min(text.size(), tag.size() - 1);
  for (std::size_t n = longest; n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

void append_events(std::vector<CallEvent>& out, std::vector<CallEvent>&& events, int base) {
  for (CallEvent& e : events) {
    e.index += base;
    if (!e.name && !out.empty() && out.back().index == e.index) {
      out.back().arguments += e.arguments;
    } else {
      out.push_back(std::move(e));
    }
  }
}

}  // namespace vpod::server::chat_output
