// The Responses API without a server: request parsing into a chat request,
// the response object and streamed events, and the bounded response store.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "random_json.h"
#include "server/response_store.h"
#include "server/responses_json.h"
#include "server/responses_request.h"

namespace vpod::server {
namespace {

using nlohmann::json;

RequestLimits limits() {
  RequestLimits l;
  l.max_model_len = 256;
  l.vocab_size = 1000;
  return l;
}

ApiResult<ResponsesRequest> parse(const json& body) {
  return parse_responses_request(body.dump(), limits());
}

TEST(ResponsesRequest, StringInputIsOneUserMessage) {
  auto r = parse({{"model", "m"}, {"input", "Hello"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->chat.model, "m");
  EXPECT_EQ(r->chat.messages.dump(), R"([{"role":"user","content":"Hello"}])");
  EXPECT_TRUE(r->store);
  EXPECT_FALSE(r->chat.output.stream);
  EXPECT_FALSE(r->max_output_tokens.has_value());
  EXPECT_FALSE(r->chat.max_tokens.has_value());
}

TEST(ResponsesRequest, MessageItemsBecomeChatMessages) {
  auto r =
      parse({{"input",
              {{{"role", "developer"}, {"content", "Be terse"}},
               {{"type", "message"},
                {"role", "user"},
                {"content", {{{"type", "input_text"}, {"text", "Hi"}}}}},
               {{"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "Yo"}}}}}}},
             {"instructions", "System says"},
             {"max_output_tokens", 7},
             {"temperature", 0.5},
             {"top_p", 0.9},
             {"stream", true},
             {"store", false},
             {"metadata", {{"k", "v"}}},
             {"user", "u1"},
             {"previous_response_id", "resp_1"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->chat.messages.dump(),
            R"([{"role":"developer","content":"Be terse"},)"
            R"({"role":"user","content":[{"type":"text","text":"Hi"}]},)"
            R"({"role":"assistant","content":[{"type":"text","text":"Yo"}]}])");
  EXPECT_EQ(r->instructions, "System says");
  EXPECT_EQ(r->max_output_tokens, 7);
  EXPECT_EQ(r->chat.max_tokens, 7);
  EXPECT_FLOAT_EQ(r->chat.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->chat.sampling.top_p, 0.9f);
  EXPECT_TRUE(r->chat.output.stream);
  EXPECT_FALSE(r->store);
  EXPECT_EQ(r->metadata, json({{"k", "v"}}));
  EXPECT_EQ(r->user, "u1");
  EXPECT_EQ(r->previous_response_id, "resp_1");
}

TEST(ResponsesRequest, NeutralValuesOfUnsupportedFieldsAreAccepted) {
  auto r = parse({{"input", "x"},
                  {"tools", json::array()},
                  {"tool_choice", "auto"},
                  {"text", {{"format", {{"type", "text"}}}}},
                  {"include", json::array()},
                  {"truncation", "disabled"},
                  {"background", false},
                  {"reasoning", nullptr},
                  {"parallel_tool_calls", true}});
  EXPECT_TRUE(r.ok()) << r.error().message;
}

void expect_400(const json& body, const std::string& param) {
  auto r = parse(body);
  ASSERT_FALSE(r.ok()) << body.dump();
  EXPECT_EQ(r.error().http_status, 400) << body.dump();
  EXPECT_EQ(r.error().param, param) << body.dump() << ": " << r.error().message;
  EXPECT_NE(r.error().message.find(param), std::string::npos) << r.error().message;
}

TEST(ResponsesRequest, UnsupportedFeaturesAreA400NamingTheField) {
  expect_400({{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}, "tools");
  expect_400({{"input", "x"}, {"tool_choice", "required"}}, "tool_choice");  // needs tools
  expect_400({{"input", "x"}, {"max_tool_calls", 2}}, "max_tool_calls");
  expect_400({{"input", "x"}, {"text", {{"verbosity", "low"}}}}, "text.verbosity");
  expect_400({{"input", "x"}, {"reasoning", {{"effort", "low"}}}}, "reasoning");
  expect_400({{"input", "x"}, {"include", {"message.output_text.logprobs"}}}, "include");
  expect_400({{"input", "x"}, {"truncation", "auto"}}, "truncation");
  expect_400({{"input", "x"}, {"background", true}}, "background");
  expect_400({{"input", "x"}, {"conversation", "conv_1"}}, "conversation");
}

const json kWeather = {{"type", "function"},
                       {"name", "get_weather"},
                       {"description", "Weather in a city"},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"city", {{"type", "string"}}}}},
                         {"required", {"city"}}}}};

// text.format is chat's response_format: the same constraint, json_schema's
// fields flat; its errors name text.format.
TEST(ResponsesRequest, TextFormatIsStructuredOutput) {
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  auto r = parse(
      {{"input", "x"},
       {"text",
        {{"format",
          {{"type", "json_schema"}, {"name", "thing"}, {"schema", schema}, {"strict", true}}}}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().chat.constraint.kind, grammar::ConstraintKind::json_schema);
  EXPECT_EQ(json::parse(r.value().chat.constraint.spec), schema);
  EXPECT_TRUE(r.value().chat.constraint.strict);
  EXPECT_EQ(r.value().text_format_echo["name"], "thing");
  EXPECT_EQ(r.value().text_format_echo["schema"], schema);

  auto object = parse({{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}});
  ASSERT_TRUE(object.ok()) << object.error().message;
  EXPECT_EQ(object.value().chat.constraint.kind, grammar::ConstraintKind::json_object);
  EXPECT_EQ(object.value().text_format_echo, json({{"type", "json_object"}}));

  auto plain = parse({{"input", "x"}, {"text", {{"format", {{"type", "text"}}}}}});
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_FALSE(plain.value().chat.constraint.active());
  EXPECT_EQ(plain.value().text_format_echo, json({{"type", "text"}}));

  expect_400({{"input", "x"}, {"text", {{"format", {{"type", "xml"}}}}}}, "text.format");
  expect_400({{"input", "x"}, {"text", {{"format", "json"}}}}, "text.format");
  // No schema; a schema xgrammar cannot honour is the handler's 400 (compile).
  expect_400({{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "n"}}}}}},
             "text.format");
  expect_400({{"input", "x"},
              {"text", {{"format", {{"type", "json_object"}}}}},
              {"structured_outputs", {{"regex", "a+"}}}},
             "text.format");
}

TEST(ResponsesRequest, FunctionToolsBecomeChatTools) {
  auto r = parse({{"input", "Weather?"},
                  {"tools", {kWeather, {{"type", "function"}, {"name", "noop"}, {"strict", true}}}},
                  {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                  {"parallel_tool_calls", false}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ToolRequest& tools = r->chat.tools;
  EXPECT_EQ(tools.choice, ToolChoice::named);
  EXPECT_EQ(tools.function_name, "get_weather");
  EXPECT_FALSE(tools.parallel_tool_calls);
  ASSERT_EQ(tools.tools.size(), 2u);
  // Chat's nested shape, which the chat template is given.
  EXPECT_EQ(json(tools.tools[0]), json({{"type", "function"},
                                        {"function",
                                         {{"name", "get_weather"},
                                          {"description", "Weather in a city"},
                                          {"parameters", kWeather["parameters"]}}}}));
  EXPECT_EQ(json(tools.tools[1]),
            json({{"type", "function"}, {"function", {{"name", "noop"}, {"strict", true}}}}));
  EXPECT_EQ(r->chat.chat_template.tools, tools.tools);
  // The Responses shape echoed, absent fields null.
  EXPECT_EQ(r->tools_echo[0], json({{"type", "function"},
                                    {"name", "get_weather"},
                                    {"description", "Weather in a city"},
                                    {"parameters", kWeather["parameters"]},
                                    {"strict", nullptr}}));
  EXPECT_EQ(r->tools_echo[1]["description"], nullptr);
  EXPECT_EQ(r->tool_choice_echo, json({{"type", "function"}, {"name", "get_weather"}}));

  auto automatic = parse({{"input", "x"}, {"tools", {kWeather}}});
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->chat.tools.choice, ToolChoice::automatic);  // tools imply auto
  EXPECT_EQ(automatic->tool_choice_echo, "auto");
  auto required = parse({{"input", "x"}, {"tools", {kWeather}}, {"tool_choice", "required"}});
  ASSERT_TRUE(required.ok());
  EXPECT_EQ(required->chat.tools.choice, ToolChoice::required);
  EXPECT_EQ(required->tool_choice_echo, "required");
  EXPECT_TRUE(required->chat.tools.parallel_tool_calls);
}

TEST(ResponsesRequest, FunctionCallItemsBecomeToolCallsAndToolMessages) {
  auto r = parse({{"input",
                   {{{"role", "user"}, {"content", "Weather in Paris and Tokyo?"}},
                    {{"type", "message"},
                     {"role", "assistant"},
                     {"content", {{{"type", "output_text"}, {"text", "Checking."}}}}},
                    {{"type", "function_call"},
                     {"id", "fc_1"},
                     {"call_id", "call_a"},
                     {"name", "get_weather"},
                     {"arguments", R"({"city": "Paris"})"},
                     {"status", "completed"}},
                    {{"type", "function_call"},
                     {"call_id", "call_b"},
                     {"name", "get_weather"},
                     {"arguments", R"({"city": "Tokyo"})"}},
                    {{"type", "function_call_output"}, {"call_id", "call_a"}, {"output", "18 C"}},
                    {{"type", "function_call_output"},
                     {"call_id", "call_b"},
                     {"output", {{{"type", "input_text"}, {"text", "25 C"}}}}},
                    {{"type", "function_call"},
                     {"call_id", "call_c"},
                     {"name", "noop"},
                     {"arguments", "{}"}}}},
                  {"tools", {kWeather, {{"type", "function"}, {"name", "noop"}}}},
                  {"tool_choice", "none"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  // One assistant turn holds the text and both calls; the arguments are
  // parsed for the template, as chat messages' are.
  EXPECT_EQ(
      r->chat.messages.dump(),
      R"([{"role":"user","content":"Weather in Paris and Tokyo?"},)"
      R"({"role":"assistant","content":[{"type":"text","text":"Checking."}],"tool_calls":[)"
      R"({"id":"call_a","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}},)"
      R"({"id":"call_b","type":"function","function":{"name":"get_weather","arguments":{"city":"Tokyo"}}}]},)"
      R"({"role":"tool","content":"18 C","tool_call_id":"call_a"},)"
      R"({"role":"tool","content":[{"type":"text","text":"25 C"}],"tool_call_id":"call_b"},)"
      R"({"role":"assistant","content":"","tool_calls":[)"
      R"({"id":"call_c","type":"function","function":{"name":"noop","arguments":{}}}]}])");
  EXPECT_EQ(r->chat.tools.choice, ToolChoice::none);
}

TEST(ResponsesRequest, BadToolsAndItemsAreA400NamingTheField) {
  const json call = {
      {"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{}"}};
  expect_400({{"input", "x"}, {"tools", kWeather}}, "tools");  // not an array
  expect_400({{"input", "x"}, {"tools", {{{"name", "f"}}}}}, "tools");
  expect_400({{"input", "x"}, {"tools", {{{"type", "function"}}}}}, "tools");
  expect_400(
      {{"input", "x"}, {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", 1}}}}},
      "tools");
  expect_400({{"input", "x"}, {"tools", {kWeather}}, {"tool_choice", "always"}}, "tool_choice");
  expect_400({{"input", "x"}, {"tools", {kWeather}}, {"tool_choice", {{"type", "file_search"}}}},
             "tool_choice");
  expect_400({{"input", "x"}, {"tools", {kWeather}}, {"tool_choice", {{"type", "function"}}}},
             "tool_choice");
  expect_400({{"input", "x"},
              {"tools", {kWeather}},
              {"tool_choice", {{"type", "function"}, {"name", "g"}}}},
             "tool_choice");
  expect_400({{"input", "x"}, {"tools", {kWeather}}, {"parallel_tool_calls", "no"}},
             "parallel_tool_calls");
  for (const char* field : {"call_id", "name", "arguments"}) {
    json item = call;
    item.erase(field);
    expect_400({{"input", {item}}}, "input");
  }
  json broken = call;
  broken["arguments"] = R"({"a": )";
  expect_400({{"input", {broken}}}, "input");
  expect_400({{"input", {{{"type", "function_call_output"}, {"call_id", "c"}}}}}, "input");
  expect_400({{"input",
               {{{"type", "function_call_output"},
                 {"call_id", "c"},
                 {"output", {{{"type", "input_image"}}}}}}}},
             "input");
  expect_400({{"input", {{{"type", "reasoning"}, {"summary", json::array()}}}}}, "input");
  // Nesting past the chat path's limit inside the arguments: named as input.
  json deep = call;
  deep["arguments"] = std::string(100, '[') + std::string(100, ']');
  expect_400({{"input", {deep}}}, "input");
}

TEST(ResponsesRequest, BadInputIsA400) {
  expect_400(json::object(), "input");
  expect_400({{"input", 3}}, "input");
  expect_400({{"input", json::array()}}, "input");
  expect_400({{"input", {{{"role", "tool"}, {"content", "x"}}}}}, "input");
  expect_400({{"input", {{{"type", "function_call_output"}, {"output", "x"}}}}}, "input");
  expect_400({{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}}, "input");
  expect_400({{"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens");
  expect_400({{"input", "x"}, {"max_output_tokens", 257}}, "max_output_tokens");
  expect_400({{"input", "x"}, {"store", "yes"}}, "store");
  expect_400({{"input", "x"}, {"metadata", {{"k", 1}}}}, "metadata");
  expect_400({{"input", "x"}, {"instructions", 5}}, "instructions");
  expect_400({{"input", "x"}, {"temperature", 3}}, "temperature");
  auto not_json = parse_responses_request("{", limits());
  ASSERT_FALSE(not_json.ok());
  EXPECT_EQ(not_json.error().http_status, 400);
}

// Random bodies, built and mutated: parsing never crashes, every failure is
// a 400 with a message, and every success is a chat request within limits.
TEST(ResponsesRequestFuzz, RandomBodiesGiveValidErrors) {
  testing::RandomJson gen(4321, {"input",
                                 "instructions",
                                 "max_output_tokens",
                                 "temperature",
                                 "top_p",
                                 "stream",
                                 "store",
                                 "metadata",
                                 "user",
                                 "previous_response_id",
                                 "tools",
                                 "tool_choice",
                                 "text",
                                 "format",
                                 "reasoning",
                                 "include",
                                 "truncation",
                                 "background",
                                 "role",
                                 "content",
                                 "type",
                                 "input_text",
                                 "output_text",
                                 "message",
                                 "model",
                                 "function",
                                 "function_call",
                                 "function_call_output",
                                 "call_id",
                                 "name",
                                 "arguments",
                                 "output",
                                 "parameters",
                                 "parallel_tool_calls"});
  int accepted = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    json body = json::object();
    if (gen.rng()() % 2) body["input"] = gen.rng()() % 2 ? json("hi") : gen.value();
    for (int i = 0, k = static_cast<int>(gen.rng()() % 5); i < k; ++i)
      body[gen.key()] = gen.value();
    const std::string text = gen.mutate(body.dump());
    auto r = parse_responses_request(text, limits());
    if (!r.ok()) {
      EXPECT_EQ(r.error().http_status, 400) << text;
      EXPECT_FALSE(r.error().message.empty()) << text;
      continue;
    }
    ++accepted;
    EXPECT_TRUE(r->chat.messages.is_array() && !r->chat.messages.empty()) << text;
    if (r->max_output_tokens) {
      EXPECT_GE(*r->max_output_tokens, 1);
      EXPECT_LE(*r->max_output_tokens, limits().max_model_len);
    }
  }
  EXPECT_GT(accepted, 100);  // the generator reaches the success path too
}

// Splits an SSE stream into (event name, data) pairs, checking the framing.
std::vector<std::pair<std::string, json>> events_of(const std::string& stream) {
  std::vector<std::pair<std::string, json>> out;
  std::size_t pos = 0;
  while (pos < stream.size()) {
    const std::size_t end = stream.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string block = stream.substr(pos, end - pos);
    const std::size_t newline = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(newline + 1, 6, "data: "), 0) << block;
    out.emplace_back(block.substr(7, newline - 7), json::parse(block.substr(newline + 7)));
    pos = end + 2;
  }
  return out;
}

ResponsesOptions options(bool stream, ResponseStore* store) {
  ResponsesOptions o;
  o.id = "resp_1";
  o.message_id = "msg_1";
  o.created_at = 1700000000;
  o.model = "m";
  o.stream = stream;
  o.prompt_tokens = 9;
  o.echoed = {{"instructions", "be brief"}, {"max_output_tokens", 4}, {"store", true}};
  o.conversation = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
  o.store = store;
  return o;
}

engine::RequestOutput delta(const std::string& text, int generated, bool finished = false,
                            engine::FinishReason reason = engine::FinishReason::none) {
  engine::RequestOutput d;
  d.text = text;
  d.num_prompt_tokens = 9;
  d.num_generated_tokens = generated;
  d.num_cached_tokens = 3;
  d.finished = finished;
  d.finish_reason = reason;
  return d;
}

TEST(ResponsesBuilder, WholeResponseAndStore) {
  ResponseStore store;
  ResponsesBuilder b(options(false, &store));
  auto d1 = delta("Hel", 2);
  EXPECT_EQ(b.add(0, d1), "");
  EXPECT_FALSE(b.all_finished());
  auto d2 = delta("lo", 3, true, engine::FinishReason::stop);
  EXPECT_EQ(b.add(0, d2), "");
  ASSERT_TRUE(b.all_finished());
  EXPECT_FALSE(b.error());
  const json r = b.response();
  EXPECT_EQ(r["id"], "resp_1");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["created_at"], 1700000000);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["incomplete_details"], nullptr);
  EXPECT_EQ(r["model"], "m");
  EXPECT_EQ(r["instructions"], "be brief");
  EXPECT_EQ(r["max_output_tokens"], 4);
  EXPECT_EQ(r["output"], json::parse(R"([{"id":"msg_1","type":"message","status":"completed",
      "role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[],
      "logprobs":[]}]}])"));
  EXPECT_EQ(r["usage"], json::parse(R"({"input_tokens":9,"input_tokens_details":
      {"cached_tokens":3},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},
      "total_tokens":12})"));
  EXPECT_EQ(b.prompt_tokens(), 9);
  EXPECT_EQ(b.completion_tokens(), 3);

  auto stored = store.find("resp_1");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(stored->response, r);
  EXPECT_EQ(stored->conversation.dump(),
            R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}])");
}

TEST(ResponsesBuilder, LengthIsIncompleteAndNotStoredWithoutStore) {
  ResponsesBuilder b(options(false, nullptr));
  auto d = delta("abcd", 4, true, engine::FinishReason::length);
  b.add(0, d);
  const json r = b.response();
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"], json({{"reason", "max_output_tokens"}}));
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
}

TEST(ResponsesBuilder, StreamedEventsInOpenAIsOrder) {
  ResponseStore store;
  ResponsesBuilder b(options(true, &store));
  auto d1 = delta("Hel", 2);
  std::string stream = b.add(0, d1);
  auto d2 = delta("", 2);  // nothing new to say: no delta event
  stream += b.add(0, d2);
  auto d3 = delta("lo", 3, true, engine::FinishReason::stop);
  stream += b.add(0, d3);
  stream += b.stream_tail();
  const auto events = events_of(stream);
  const std::vector<std::string> expected = {
      "response.created",           "response.in_progress",
      "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta",
      "response.output_text.done",  "response.content_part.done",
      "response.output_item.done",  "response.completed"};
  ASSERT_EQ(events.size(), expected.size()) << stream;
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].first, expected[i]);
    EXPECT_EQ(events[i].second["type"], expected[i]);
    EXPECT_EQ(events[i].second["sequence_number"], i);
  }
  EXPECT_EQ(events[0].second["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].second["response"]["output"], json::array());
  EXPECT_EQ(events[2].second["item"]["status"], "in_progress");
  EXPECT_EQ(events[2].second["item"]["content"], json::array());
  EXPECT_EQ(events[3].second["part"]["text"], "");
  const json& first_delta = events[4].second;
  EXPECT_EQ(first_delta["delta"], "Hel");
  EXPECT_EQ(first_delta["item_id"], "msg_1");
  EXPECT_EQ(first_delta["output_index"], 0);
  EXPECT_EQ(first_delta["content_index"], 0);
  EXPECT_EQ(events[5].second["delta"], "lo");
  EXPECT_EQ(events[6].second["text"], "Hello");
  EXPECT_EQ(events[7].second["part"]["text"], "Hello");
  EXPECT_EQ(events[8].second["item"]["content"][0]["text"], "Hello");
  const json& done = events[9].second["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["usage"]["output_tokens"], 3);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello");
  ASSERT_NE(store.find("resp_1"), nullptr);
  EXPECT_EQ(store.find("resp_1")->response, done);
}

TEST(ResponsesBuilder, StreamEndsWithIncompleteOrFailed) {
  {
    ResponsesBuilder b(options(true, nullptr));
    auto d = delta("x", 4, true, engine::FinishReason::length);
    const auto events = events_of(b.add(0, d));
    EXPECT_EQ(events.back().first, "response.incomplete");
    EXPECT_EQ(events.back().second["response"]["incomplete_details"]["reason"],
              "max_output_tokens");
  }
  {
    ResponseStore store;
    ResponsesBuilder b(options(true, &store));
    auto d = delta("", 0, true, engine::FinishReason::error);
    d.error = "boom";
    const auto events = events_of(b.add(0, d));
    EXPECT_EQ(events.back().first, "response.failed");
    EXPECT_EQ(events.back().second["response"]["status"], "failed");
    ASSERT_TRUE(b.error());
    EXPECT_EQ(b.error()->http_status, 500);
    EXPECT_EQ(store.size(), 0u);  // a failed response is not continued
  }
}

ResponsesOptions tool_options(
    bool stream, ResponseStore* store, chat_output::ToolMode mode,
    chat_output::ToolParserKind parser = chat_output::ToolParserKind::none) {
  ResponsesOptions o = options(stream, store);
  o.tool_output.tools = mode;
  o.tool_output.parser = parser;
  o.tool_output.function_name = "get_weather";  // ToolMode::named
  return o;
}

// Feeds `text` in pieces of `piece` bytes, the last finished with `reason`;
// returns what add() gave.
std::string feed(ResponsesBuilder& b, const std::string& text, std::size_t piece,
                 engine::FinishReason reason = engine::FinishReason::stop) {
  std::string out;
  for (std::size_t at = 0; at < text.size(); at += piece) {
    const bool last = at + piece >= text.size();
    auto d = delta(text.substr(at, piece), static_cast<int>(at / piece) + 1, last,
                   last ? reason : engine::FinishReason::none);
    out += b.add(0, d);
  }
  return out;
}

bool starts_with(const json& v, std::string_view prefix) {
  return v.is_string() && v.get<std::string>().rfind(prefix, 0) == 0;
}

TEST(ResponsesBuilder, RequiredCallIsAFunctionCallItemAndStored) {
  ResponseStore store;
  ResponsesBuilder b(tool_options(false, &store, chat_output::ToolMode::required));
  EXPECT_EQ(feed(b, R"([{"name": "get_weather", "parameters": {"city": "Paris"}}])", 7), "");
  ASSERT_TRUE(b.all_finished());
  const json r = b.response();
  EXPECT_EQ(r["status"], "completed");
  ASSERT_EQ(r["output"].size(), 1u) << r["output"];
  const json& call = r["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_TRUE(starts_with(call["id"], "fc_")) << call;
  EXPECT_TRUE(starts_with(call["call_id"], "call_")) << call;
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], R"({"city": "Paris"})");
  EXPECT_EQ(call["status"], "completed");
  // The conversation goes on with the call as chat's assistant tool_calls,
  // its arguments parsed for the template.
  auto stored = store.find("resp_1");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(json(stored->conversation),
            json::parse(R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"",
                "tool_calls":[{"id":")" +
                        call["call_id"].get<std::string>() +
                        R"(","type":"function","function":{"name":"get_weather",
                "arguments":{"city":"Paris"}}}]}])"));
}

TEST(ResponsesBuilder, NamedCallAndNothingGenerated) {
  ResponsesBuilder named(tool_options(false, nullptr, chat_output::ToolMode::named));
  feed(named, R"({"city": "Tokyo"})", 4);
  const json r = named.response();
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["name"], "get_weather");
  EXPECT_EQ(r["output"][0]["arguments"], R"({"city": "Tokyo"})");

  // No text at all: one empty message item, as without tools.
  ResponsesBuilder empty(tool_options(true, nullptr, chat_output::ToolMode::required));
  auto d = delta("", 0, true, engine::FinishReason::stop);
  const auto events = events_of(empty.add(0, d));
  std::vector<std::string> types;
  for (const auto& e : events) types.push_back(e.first);
  EXPECT_EQ(types,
            (std::vector<std::string>{"response.created", "response.in_progress",
                                      "response.output_item.added", "response.content_part.added",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  const json& output = events.back().second["response"]["output"];
  ASSERT_EQ(output.size(), 1u);
  EXPECT_EQ(output[0]["type"], "message");
  EXPECT_EQ(output[0]["content"][0]["text"], "");
}

// Text then a Hermes call, streamed in pieces: OpenAI's events per item, and
// the same output as the whole response.
TEST(ResponsesBuilder, StreamedTextAndCallMatchTheWholeResponse) {
  const std::string text =
      "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  for (std::size_t piece : {1, 3, 8, 200}) {
    ResponseStore store;
    ResponsesBuilder streamed(tool_options(true, &store, chat_output::ToolMode::parse,
                                           chat_output::ToolParserKind::hermes));
    const auto events = events_of(feed(streamed, text, piece));
    ResponsesBuilder whole(tool_options(false, nullptr, chat_output::ToolMode::parse,
                                        chat_output::ToolParserKind::hermes));
    feed(whole, text, piece);

    std::vector<std::string> types;
    std::string text_deltas, argument_deltas;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const auto& [type, data] = events[i];
      EXPECT_EQ(data["sequence_number"], i);
      // Collapse runs of deltas to one entry for the order check.
      const bool delta_event =
          type == "response.output_text.delta" || type == "response.function_call_arguments.delta";
      if (!delta_event || types.empty() || types.back() != type) types.push_back(type);
      if (type == "response.output_text.delta") {
        EXPECT_EQ(data["output_index"], 0);
        EXPECT_EQ(data["item_id"], "msg_1");
        text_deltas += data["delta"].get<std::string>();
      }
      if (type == "response.function_call_arguments.delta") {
        EXPECT_EQ(data["output_index"], 1);
        argument_deltas += data["delta"].get<std::string>();
      }
    }
    EXPECT_EQ(types, (std::vector<std::string>{
                         "response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta",
                         "response.output_item.added", "response.function_call_arguments.delta",
                         "response.output_text.done", "response.content_part.done",
                         "response.output_item.done", "response.function_call_arguments.done",
                         "response.output_item.done", "response.completed"}))
        << "piece " << piece;
    EXPECT_EQ(text_deltas, "Sure.");
    EXPECT_EQ(argument_deltas, R"({"city": "Paris"})");
    // The call's item: announced with empty arguments, closed with them.
    const json* added = nullptr;
    for (const auto& [type, data] : events) {
      if (type == "response.output_item.added" && data["output_index"] == 1) added = &data;
    }
    ASSERT_NE(added, nullptr);
    EXPECT_EQ((*added)["item"]["type"], "function_call");
    EXPECT_EQ((*added)["item"]["arguments"], "");
    EXPECT_EQ((*added)["item"]["status"], "in_progress");
    EXPECT_EQ((*added)["item"]["name"], "get_weather");
    const json& args_done = events[events.size() - 3].second;
    EXPECT_EQ(args_done["arguments"], R"({"city": "Paris"})");
    EXPECT_EQ(args_done["item_id"], (*added)["item"]["id"]);

    const json final_output = events.back().second["response"]["output"];
    json whole_output = whole.response()["output"];
    ASSERT_EQ(final_output.size(), 2u);
    ASSERT_EQ(whole_output.size(), 2u);
    EXPECT_EQ(final_output[0]["content"][0]["text"], "Sure.");
    // Equal but for the fresh ids of the call.
    json a = final_output, w = whole_output;
    for (json* o : {&a, &w}) {
      (*o)[1].erase("id");
      (*o)[1].erase("call_id");
    }
    EXPECT_EQ(a, w) << "piece " << piece;
    // Stored: one assistant turn with the text and the call.
    auto stored = store.find("resp_1");
    ASSERT_NE(stored, nullptr);
    const auto& turn = stored->conversation.back();
    EXPECT_EQ(turn["content"], "Sure.");
    EXPECT_EQ(turn["tool_calls"][0]["id"], final_output[1]["call_id"]);
    EXPECT_EQ(turn["tool_calls"][0]["function"]["arguments"], json({{"city", "Paris"}}));
  }
}

TEST(ResponsesBuilder, BrokenCallIsTextWhenWholeAndIncompleteWhenCut) {
  const std::string text = "<tool_call>\n{\"name\": \"get_weather\", \"argu";
  ResponsesBuilder whole(tool_options(false, nullptr, chat_output::ToolMode::parse,
                                      chat_output::ToolParserKind::hermes));
  feed(whole, text, 5, engine::FinishReason::length);
  const json r = whole.response();
  EXPECT_EQ(r["status"], "incomplete");
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], text);

  // Streamed, what went out stays; the item the limit cut is incomplete.
  ResponsesBuilder streamed(tool_options(true, nullptr, chat_output::ToolMode::required));
  const auto events = events_of(feed(streamed, R"([{"name": "get_weather", "parameters": {"ci)", 4,
                                     engine::FinishReason::length));
  EXPECT_EQ(events.back().first, "response.incomplete");
  const json& output = events.back().second["response"]["output"];
  ASSERT_EQ(output.size(), 1u);
  EXPECT_EQ(output[0]["type"], "function_call");
  EXPECT_EQ(output[0]["status"], "incomplete");
}

StoredResponse entry(const std::string& id, std::size_t bytes) {
  StoredResponse e;
  e.id = id;
  e.bytes = bytes;
  return e;
}

TEST(ResponseStore, EvictsOldestByCount) {
  ResponseStore store({/*max_responses=*/2, /*max_bytes=*/1000});
  store.put(entry("a", 10));
  store.put(entry("b", 10));
  store.put(entry("c", 10));
  EXPECT_EQ(store.find("a"), nullptr);
  EXPECT_NE(store.find("b"), nullptr);
  EXPECT_NE(store.find("c"), nullptr);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.bytes(), 20u);
}

TEST(ResponseStore, EvictsOldestByBytesAndSkipsWhatCannotFit) {
  ResponseStore store({/*max_responses=*/10, /*max_bytes=*/100});
  store.put(entry("a", 40));
  store.put(entry("b", 40));
  store.put(entry("c", 40));  // a goes
  EXPECT_EQ(store.find("a"), nullptr);
  EXPECT_EQ(store.bytes(), 80u);
  store.put(entry("huge", 101));  // over the whole budget: not kept, nothing evicted
  EXPECT_EQ(store.find("huge"), nullptr);
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.erase("b"));
  EXPECT_FALSE(store.erase("b"));
  EXPECT_EQ(store.bytes(), 40u);
  store.put(entry("c", 50));  // replaces c
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), 50u);
}

TEST(ResponseStore, ZeroMeansNothingIsKept) {
  ResponseStore store({/*max_responses=*/0, /*max_bytes=*/100});
  store.put(entry("a", 1));
  EXPECT_EQ(store.find("a"), nullptr);
}

}  // namespace
}  // namespace vpod::server
