// ChatOutputParser and parse_chat_message (chat_output.h): the reasoning and
// tool-call parsers chained, their pieces turned into OpenAI delta objects.
#include "server/chat_output/chat_output.h"

#include <fmt/format.h>

#include <random>
#include <thread>

namespace vpod::server::chat_output {
namespace {

using nlohmann::json;

bool all_space(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

std::mt19937_64& id_rng() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return rng;
}

json arguments_delta(int index, std::string_view arguments) {
  return {
      {"tool_calls", json::array({{{"index", index}, {"function", {{"arguments", arguments}}}}})}};
}

}  // namespace

std::string make_tool_call_id(ToolParserKind parser) {
  std::mt19937_64& rng = id_rng();
  if (parser == ToolParserKind::mistral) {
    constexpr std::string_view kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string id(9, ' ');
    for (char& c : id) c = kAlphabet[rng() % kAlphabet.size()];
    return id;
  }
  return fmt::format("chatcmpl-tool-{:016x}{:016x}", rng(), rng());
}

ChatOutputParser::ChatOutputParser(const ChatOutputConfig& config) : config_(config) {
  if (config.reasoning == ReasoningParserKind::qwen3) think_ = std::make_unique<ThinkParser>();
  switch (config.tools) {
    case ToolMode::parse: tools_ = make_tool_parser(config.parser); break;
    case ToolMode::required: tools_ = make_required_parser(); break;
    case ToolMode::named: tools_ = make_named_parser(config.function_name); break;
    case ToolMode::none: break;
  }
}

std::vector<json> ChatOutputParser::feed(std::string_view text) {
  if (!think_) return process({}, text, false);
  std::string reasoning, answer;
  think_->feed(text, reasoning, answer);
  return process(reasoning, answer, false);
}

std::vector<json> ChatOutputParser::finish() {
  std::string reasoning, answer;
  if (think_) think_->finish(reasoning, answer);
  return process(reasoning, answer, true);
}

std::vector<json> ChatOutputParser::process(std::string_view reasoning, std::string_view answer,
                                            bool last) {
  std::vector<json> deltas;
  if (!reasoning.empty()) {
    reasoning_ += reasoning;
    deltas.push_back({{"reasoning_content", reasoning}});
  }
  answer_ += answer;
  ParsedText parsed;
  if (tools_) {
    tools_->feed(answer, parsed);
    if (last) tools_->finish(parsed);
  } else {
    parsed.content = answer;
  }

  // Trailing whitespace is held until text follows it: whitespace around tool
  // calls ("\n" before <tool_call> or between two) is no content, and is
  // dropped once a call is made; so streamed and whole answers agree however
  // the text was cut.
  std::string content = std::move(held_space_) + parsed.content;
  held_space_.clear();
  const bool calls = !calls_.empty() || !parsed.calls.empty();
  if (!last || calls) {
    const std::size_t end = content.find_last_not_of(" \t\r\n");
    const std::size_t keep = end == std::string::npos ? 0 : end + 1;
    if (!last) held_space_ = content.substr(keep);
    content.resize(keep);
  }
  if (!content.empty()) {
    content_ += content;
    deltas.push_back({{"content", content}});
  }

  for (CallEvent& e : parsed.calls) {
    // Without parallel tool calls only the first call is kept (as vLLM does).
    if (!config_.parallel_tool_calls && e.index > 0) continue;
    if (e.name) {
      const int index = static_cast<int>(calls_.size());
      calls_.push_back({make_tool_call_id(config_.parser), *e.name, {}});
      deltas.push_back(
          {{"tool_calls", json::array({{{"index", index},
                                        {"id", calls_.back().id},
                                        {"type", "function"},
                                        {"function", {{"name", *e.name}, {"arguments", ""}}}}})}});
    }
    if (e.index >= static_cast<int>(calls_.size()) || e.arguments.empty()) continue;
    calls_[e.index].arguments += e.arguments;
    deltas.push_back(arguments_delta(e.index, e.arguments));
  }
  return deltas;
}

bool ChatOutputParser::malformed() const {
  if (!tools_) return false;
  if (tools_->malformed()) return true;
  for (const Call& c : calls_) {
    if (!json::accept(c.arguments)) return true;
  }
  return false;
}

json parse_chat_message(const ChatOutputConfig& config, std::string_view text, bool& tools_called) {
  ChatOutputParser parser(config);
  parser.feed(text);
  parser.finish();
  const bool calls = parser.tools_called() && !parser.malformed();
  // Broken calls: the whole answer is content, as vLLM answers.
  const std::string& content = parser.malformed() ? parser.answer() : parser.content();
  json message = {{"role", "assistant"}};
  const bool no_content =
      content.empty() && (calls || !parser.reasoning().empty() || config.tools != ToolMode::none);
  message["content"] = no_content || (calls && all_space(content)) ? json(nullptr) : json(content);
  if (config.reasoning != ReasoningParserKind::none) {
    message["reasoning_content"] =
        parser.reasoning().empty() ? json(nullptr) : json(parser.reasoning());
  }
  if (calls) {
    json list = json::array();
    for (const ChatOutputParser::Call& c : parser.calls()) {
      list.push_back({{"id", c.id},
                      {"type", "function"},
                      {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    message["tool_calls"] = std::move(list);
  }
  tools_called = calls && parser.reports_tool_calls();
  return message;
}

}  // namespace vpod::server::chat_output
