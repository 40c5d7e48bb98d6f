// Tool-call and reasoning parsers (server/chat_output/): every parser
// streamed in pieces of every size must give what the whole text gives, with
// OpenAI's delta shapes; partial tags, malformed JSON and parallel calls.
#include "server/chat_output/chat_output.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace vpod::server::chat_output {
namespace {

using nlohmann::json;

struct Streamed {
  std::string content;
  std::string reasoning;
  std::vector<json> calls;  // {"id", "name", "arguments"}
  bool reports_tool_calls = false;
};

// Feeds `text` in pieces of `piece` bytes and reassembles the deltas,
// checking each delta's shape as OpenAI streams it.
Streamed stream(const ChatOutputConfig& config, std::string_view text, std::size_t piece) {
  ChatOutputParser parser(config);
  Streamed out;
  const auto take = [&](std::vector<json> deltas) {
    for (const json& d : deltas) {
      ASSERT_EQ(d.size(), 1u) << d.dump();
      if (d.contains("content")) {
        ASSERT_FALSE(d["content"].get<std::string>().empty());
        out.content += d["content"].get<std::string>();
      } else if (d.contains("reasoning_content")) {
        out.reasoning += d["reasoning_content"].get<std::string>();
      } else {
        ASSERT_TRUE(d.contains("tool_calls")) << d.dump();
        ASSERT_EQ(d["tool_calls"].size(), 1u);
        const json& call = d["tool_calls"][0];
        const int index = call["index"].get<int>();
        if (call.contains("id")) {
          // A call's first delta: index, id, type, name and empty arguments.
          ASSERT_EQ(index, static_cast<int>(out.calls.size()));
          EXPECT_EQ(call["type"], "function");
          EXPECT_EQ(call["function"]["arguments"], "");
          out.calls.push_back(
              {{"id", call["id"]}, {"name", call["function"]["name"]}, {"arguments", ""}});
        } else {
          // Then argument text only.
          ASSERT_EQ(call.size(), 2u) << call.dump();
          ASSERT_LT(index, static_cast<int>(out.calls.size()));
          const std::string piece_text = call["function"]["arguments"].get<std::string>();
          ASSERT_FALSE(piece_text.empty());
          out.calls[index]["arguments"] =
              out.calls[index]["arguments"].get<std::string>() + piece_text;
        }
      }
    }
  };
  for (std::size_t i = 0; i < text.size(); i += piece) take(parser.feed(text.substr(i, piece)));
  take(parser.finish());
  out.reports_tool_calls = parser.reports_tool_calls();
  return out;
}

// That streaming in pieces of any size gives the same calls (and the same
// content when the calls are well formed) as the whole message `m`.
void check_streams(const ChatOutputConfig& config, std::string_view text, const json& m,
                   bool called) {
  const Streamed whole = stream(config, text, text.size() + 1);
  for (std::size_t piece = 1; piece <= 7; ++piece) {
    const Streamed s = stream(config, text, piece);
    EXPECT_EQ(s.content, whole.content) << "piece " << piece;
    EXPECT_EQ(s.reasoning, whole.reasoning) << "piece " << piece;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << "piece " << piece;
    for (std::size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i]["name"], whole.calls[i]["name"]);
      EXPECT_EQ(s.calls[i]["arguments"], whole.calls[i]["arguments"]);
    }
  }
  if (!m.contains("tool_calls")) return;
  // Well-formed calls stream exactly as they are reported whole.
  EXPECT_EQ(whole.reports_tool_calls, called);
  ASSERT_EQ(whole.calls.size(), m["tool_calls"].size());
  for (std::size_t i = 0; i < whole.calls.size(); ++i) {
    EXPECT_EQ(whole.calls[i]["name"], m["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(whole.calls[i]["arguments"], m["tool_calls"][i]["function"]["arguments"]);
  }
  const std::string content = m["content"].is_null() ? "" : m["content"].get<std::string>();
  EXPECT_EQ(whole.content, content);
}

// The non-streamed message, checked against the streamed pieces.
json message(const ChatOutputConfig& config, std::string_view text, bool* tool_calls = nullptr) {
  bool called = false;
  json m = parse_chat_message(config, text, called);
  if (tool_calls) *tool_calls = called;
  check_streams(config, text, m, called);
  return m;
}

ChatOutputConfig auto_tools(ToolParserKind kind) {
  ChatOutputConfig c;
  c.tools = ToolMode::parse;
  c.parser = kind;
  return c;
}

void expect_call(const json& m, std::size_t i, const std::string& name, const json& arguments) {
  ASSERT_TRUE(m.contains("tool_calls")) << m.dump();
  ASSERT_LT(i, m["tool_calls"].size()) << m.dump();
  const json& call = m["tool_calls"][i];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u) << call["id"];
  EXPECT_EQ(call["function"]["name"], name);
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), arguments);
}

TEST(HermesParser, CallAfterContent) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": [1, 2]}}\n</tool_call>";
  bool called = false;
  json m = message(auto_tools(ToolParserKind::hermes), text, &called);
  EXPECT_TRUE(called);
  EXPECT_EQ(m["content"], "Let me check.");  // the whitespace before the call is dropped
  expect_call(m, 0, "get_weather", {{"city", "Paris"}, {"days", {1, 2}}});
  // The arguments are the model's own JSON text.
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\", \"days\": [1, 2]}");
}

TEST(HermesParser, ParallelCallsAndNoContent) {
  const std::string text =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": "
      "\"}{<tool_call>\\\"\"}}\n</tool_call>\n"
      "<tool_call>\n{\"arguments\": {}, \"name\": \"b\"}\n</tool_call>";
  json m = message(auto_tools(ToolParserKind::hermes), text);
  EXPECT_TRUE(m["content"].is_null());
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  expect_call(m, 0, "a", {{"x", "}{<tool_call>\""}});
  expect_call(m, 1, "b", json::object());
  EXPECT_NE(m["tool_calls"][0]["id"], m["tool_calls"][1]["id"]);

  ChatOutputConfig single = auto_tools(ToolParserKind::hermes);
  single.parallel_tool_calls = false;
  json one = message(single, text);
  ASSERT_EQ(one["tool_calls"].size(), 1u);
  expect_call(one, 0, "a", {{"x", "}{<tool_call>\""}});
}

TEST(HermesParser, PlainTextAndPartialTags) {
  json m = message(auto_tools(ToolParserKind::hermes), "a < b and <tool_c");
  EXPECT_EQ(m["content"], "a < b and <tool_c");
  EXPECT_FALSE(m.contains("tool_calls"));
  bool called = true;
  m = message(auto_tools(ToolParserKind::hermes), "no calls here", &called);
  EXPECT_FALSE(called);
  EXPECT_EQ(m["content"], "no calls here");
}

TEST(HermesParser, MalformedFallsBackToContent) {
  for (const std::string text : {
           "<tool_call>{\"name\": oops}</tool_call>",
           "<tool_call>not json</tool_call> after",
           "<tool_call>{\"arguments\": {}}</tool_call>",             // no name
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1",  // cut off
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": tru}}</tool_call>",
       }) {
    bool called = true;
    json m = parse_chat_message(auto_tools(ToolParserKind::hermes), text, called);
    EXPECT_FALSE(called) << text;
    EXPECT_FALSE(m.contains("tool_calls")) << text;
    EXPECT_EQ(m["content"], text);
  }
  // Streamed, a tag that holds no call comes out as content.
  const Streamed s =
      stream(auto_tools(ToolParserKind::hermes), "x <tool_call>not json</tool_call> y", 3);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "x <tool_call>not json</tool_call> y");
}

TEST(HermesParser, UnclosedTagAndStringArguments) {
  json m = message(auto_tools(ToolParserKind::hermes),
                   "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"k\\\": 2}\"}");
  expect_call(m, 0, "f", {{"k", 2}});
}

TEST(Llama3JsonParser, Calls) {
  const auto config = auto_tools(ToolParserKind::llama3_json);
  json m = message(config, "{\"name\": \"f\", \"parameters\": {\"a\": 1}}");
  expect_call(m, 0, "f", {{"a", 1}});
  EXPECT_TRUE(m["content"].is_null());
  m = message(config, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
  expect_call(m, 0, "f", json::object());
  m = message(config,
              "  {\"name\": \"f\", \"parameters\": {\"a\": \"x;y\"}}; {\"name\": \"g\", "
              "\"parameters\": {\"b\": null}}");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  expect_call(m, 1, "g", {{"b", nullptr}});
  m = message(config, "{\"name\": \"f\"}");  // no arguments: {}
  expect_call(m, 0, "f", json::object());
}

TEST(Llama3JsonParser, ContentWhenNoCall) {
  const auto config = auto_tools(ToolParserKind::llama3_json);
  for (const std::string text : {"Hello there", "{\"foo\": 1}", "<|python_tag|>print(1)",
                                 "<|python", "The answer: {\"name\": \"f\"}"}) {
    bool called = true;
    json m = message(config, text, &called);
    EXPECT_FALSE(called) << text;
    EXPECT_EQ(m["content"], text);
  }
}

TEST(MistralParser, Calls) {
  const auto config = auto_tools(ToolParserKind::mistral);
  json m = message(config,
                   "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": \"y\"}}, "
                   "{\"name\": \"g\", \"arguments\": {}}]");
  EXPECT_EQ(m["content"], "Sure.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  // Mistral's template takes only 9-character alphanumeric ids.
  for (const json& call : m["tool_calls"]) {
    const std::string id = call["id"].get<std::string>();
    EXPECT_EQ(id.size(), 9u);
    for (char c : id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
  }
  EXPECT_EQ(m["tool_calls"][1]["function"]["name"], "g");
  m = message(config, "[TOOL_CALLS]{\"name\": \"f\", \"arguments\": {\"x\": 1}}");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"x\": 1}");
}

TEST(MistralParser, NameAndArgsCalls) {
  // Tokenizer v11 and later: [TOOL_CALLS]name[ARGS]{...} per call.
  const auto config = auto_tools(ToolParserKind::mistral);
  json m = message(config,
                   "Checking. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"x\": "
                   "[\"]\"]}[TOOL_CALLS]get_time[ARGS]{}");
  EXPECT_EQ(m["content"], "Checking.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}, {"x", {"]"}}}));
  EXPECT_EQ(m["tool_calls"][1]["function"]["name"], "get_time");
  bool called = true;
  for (const std::string text : {"[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
                                 "[TOOL_CALLS]bad name[ARGS]{}", "[TOOL_CALLS]f[ARG"}) {
    m = parse_chat_message(config, text, called);
    EXPECT_FALSE(called) << text;
    EXPECT_EQ(m["content"], text);
  }
}

TEST(MistralParser, Malformed) {
  const auto config = auto_tools(ToolParserKind::mistral);
  for (const std::string text :
       {"[TOOL_CALLS] nothing", "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}",
        "[TOOL_CALLS] [{\"name\": 3}]", "[TOOL_"}) {
    bool called = true;
    json m = parse_chat_message(config, text, called);
    EXPECT_FALSE(called) << text;
    EXPECT_EQ(m["content"], text);
  }
}

TEST(ForcedCalls, Required) {
  ChatOutputConfig config;
  config.tools = ToolMode::required;
  const std::string text =
      "[{\"name\": \"a\", \"parameters\": {\"x\": 1}}, {\"name\": \"b\", \"parameters\": {}}]";
  bool called = false;
  json m = message(config, text, &called);
  EXPECT_TRUE(called);
  EXPECT_TRUE(m["content"].is_null());
  expect_call(m, 0, "a", {{"x", 1}});
  expect_call(m, 1, "b", json::object());
  config.parallel_tool_calls = false;
  m = message(config, text);
  EXPECT_EQ(m["tool_calls"].size(), 1u);
  // Cut off (max_tokens): no calls, the text is content.
  m = parse_chat_message(config, "[{\"name\": \"a\", \"param", called);
  EXPECT_FALSE(called);
  EXPECT_EQ(m["content"], "[{\"name\": \"a\", \"param");
}

TEST(ForcedCalls, Named) {
  ChatOutputConfig config;
  config.tools = ToolMode::named;
  config.function_name = "get_weather";
  bool called = true;
  json m = message(config, "{\"city\": \"Paris\"}", &called);
  // OpenAI: a forced function call finishes with "stop".
  EXPECT_FALSE(called);
  expect_call(m, 0, "get_weather", {{"city", "Paris"}});
  m = parse_chat_message(config, "{\"city\": ", called);
  EXPECT_FALSE(m.contains("tool_calls"));
  EXPECT_EQ(m["content"], "{\"city\": ");
}

TEST(ThinkParser, Qwen3) {
  ChatOutputConfig config;
  config.reasoning = ReasoningParserKind::qwen3;
  json m = message(config, "<think>\nLet me think.\n</think>\n\nThe answer.");
  EXPECT_EQ(m["reasoning_content"], "\nLet me think.\n");
  EXPECT_EQ(m["content"], "\n\nThe answer.");
  m = message(config, "Just an answer <think> here");
  EXPECT_TRUE(m["reasoning_content"].is_null());
  EXPECT_EQ(m["content"], "Just an answer <think> here");
  m = message(config, "<think>cut off by max_to");
  EXPECT_EQ(m["reasoning_content"], "cut off by max_to");
  EXPECT_TRUE(m["content"].is_null());
  m = message(config, "<thin");
  EXPECT_EQ(m["content"], "<thin");
}

TEST(ThinkParser, ThenToolCalls) {
  ChatOutputConfig config = auto_tools(ToolParserKind::hermes);
  config.reasoning = ReasoningParserKind::qwen3;
  const std::string text =
      "<think>\nI should call f, with <tool_call> in mind.\n</think>\n\n<tool_call>\n{\"name\": "
      "\"f\", \"arguments\": {}}\n</tool_call>";
  bool called = false;
  json m = message(config, text, &called);
  EXPECT_TRUE(called);
  EXPECT_EQ(m["reasoning_content"], "\nI should call f, with <tool_call> in mind.\n");
  EXPECT_TRUE(m["content"].is_null());
  expect_call(m, 0, "f", json::object());
}

TEST(ChatOutputParser, DeltaShapes) {
  ChatOutputParser parser(auto_tools(ToolParserKind::hermes));
  auto deltas = parser.feed("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\"");
  ASSERT_EQ(deltas.size(), 2u);
  const json& header = deltas[0]["tool_calls"][0];
  EXPECT_EQ(header["index"], 0);
  EXPECT_EQ(header["type"], "function");
  EXPECT_EQ(header["function"], json({{"name", "f"}, {"arguments", ""}}));
  EXPECT_EQ(deltas[1],
            json({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "{\"a\""}}}}}}}));
  deltas = parser.feed(": 1}}</tool_call>");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0]["tool_calls"][0]["function"]["arguments"], ": 1}");
  EXPECT_TRUE(parser.finish().empty());
  EXPECT_TRUE(parser.reports_tool_calls());
}

// Random texts built from the pieces the parsers look for: no crash, and
// every way of cutting the text streams the same content, reasoning and
// calls as feeding it whole (message() checks that for pieces of 1..7 bytes).
TEST(ChatOutputParser, RandomTextsStreamAlikeHoweverCut) {
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "[TOOL_CALLS]",
                                           "<|python_tag|>",
                                           "<think>",
                                           "</think>",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"name\"",
                                           "\"arguments\"",
                                           "\"parameters\"",
                                           ":",
                                           ",",
                                           ";",
                                           "\"f\"",
                                           "\"\\\"\"",
                                           " ",
                                           "\n",
                                           "x",
                                           "\xc3\xa9",
                                           "1",
                                           "null",
                                           "<",
                                           "[TOOL",
                                           "[ARGS]",
                                           "f",
                                           "\"",
                                           "\\"};
  std::vector<ChatOutputConfig> configs = {auto_tools(ToolParserKind::hermes),
                                           auto_tools(ToolParserKind::llama3_json),
                                           auto_tools(ToolParserKind::mistral)};
  ChatOutputConfig required;
  required.tools = ToolMode::required;
  configs.push_back(required);
  ChatOutputConfig thinking = auto_tools(ToolParserKind::hermes);
  thinking.reasoning = ReasoningParserKind::qwen3;
  thinking.parallel_tool_calls = false;
  configs.push_back(thinking);
  std::mt19937 rng(26);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    for (const ChatOutputConfig& config : configs) {
      SCOPED_TRACE(text);
      message(config, text);
    }
  }
  // Shapes that are calls, with noise around them.
  for (int round = 0; round < 100; ++round) {
    std::string noise;
    for (int i = 0, k = static_cast<int>(rng() % 4); i < k; ++i) noise += pieces[rng() % 8];
    const std::string call = "{\"name\": \"f" + std::to_string(round) +
                             "\", \"arguments\": {\"k\": [1, {\"s\": \"}]\\\"\"}]}}";
    for (const std::string& text :
         {noise + "<tool_call>" + call + "</tool_call>" + noise,
          "[TOOL_CALLS][" + call + ", " + call + "]" + noise, call + ";" + call + noise}) {
      for (const ChatOutputConfig& config : configs) {
        SCOPED_TRACE(text);
        message(config, text);
      }
    }
  }
}

TEST(ChatOutputParser, ParserNames) {
  EXPECT_EQ(tool_parser_from_name("hermes"), ToolParserKind::hermes);
  EXPECT_EQ(tool_parser_from_name("qwen3"), ToolParserKind::hermes);
  EXPECT_EQ(tool_parser_from_name("llama4_json"), ToolParserKind::llama3_json);
  EXPECT_EQ(tool_parser_from_name("mistral"), ToolParserKind::mistral);
  EXPECT_FALSE(tool_parser_from_name("pythonic"));
  EXPECT_EQ(reasoning_parser_from_name("qwen3"), ReasoningParserKind::qwen3);
  EXPECT_FALSE(reasoning_parser_from_name("deepseek_r1"));
}

}  // namespace
}  // namespace vpod::server::chat_output
