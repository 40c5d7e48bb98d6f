#include "server/request_parse.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "random_json.h"
#include "tokenizer/chat_template.h"

namespace vpod::server {
namespace {

using nlohmann::json;

RequestLimits limits() {
  RequestLimits l;
  l.max_model_len = 2048;
  l.vocab_size = 1000;
  return l;
}

ApiResult<CompletionRequest> completion(const json& body) {
  return parse_completion_request(body.dump(), limits());
}
ApiResult<ChatRequest> chat(const json& body) { return parse_chat_request(body.dump(), limits()); }

// Expects a 400 naming `param` (when given).
template <typename T>
void expect_bad(const ApiResult<T>& r, const std::string& param = "", int status = 400) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, status) << r.error().message;
  EXPECT_FALSE(r.error().message.empty());
  EXPECT_EQ(r.error().type, "invalid_request_error");
  if (!param.empty()) {
    EXPECT_EQ(r.error().param, param) << r.error().message;
  }
}

TEST(CompletionParse, AllFields) {
  auto r = completion({{"model", "m"},
                       {"prompt", "hello"},
                       {"max_tokens", 32},
                       {"temperature", 0.5},
                       {"top_p", 0.9},
                       {"n", 2},
                       {"stop", {"a", "bc"}},
                       {"seed", -3},
                       {"echo", true},
                       {"presence_penalty", 1.5},
                       {"frequency_penalty", -0.5},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}},
                       {"top_k", 40},
                       {"min_p", 0.05},
                       {"repetition_penalty", 1.1},
                       {"min_tokens", 4},
                       {"stop_token_ids", {5, 7}},
                       {"ignore_eos", true},
                       {"skip_special_tokens", false},
                       {"include_stop_str_in_output", true},
                       {"return_token_ids", true},
                       {"user", "someone"},
                       {"an_unknown_field", {{"is", "ignored"}}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const CompletionRequest& c = r.value();
  EXPECT_EQ(c.model, "m");
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(c.prompts[0].text, "hello");
  EXPECT_FALSE(c.prompts[0].is_token_ids);
  EXPECT_EQ(c.stop.max_tokens, 32);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(c.sampling.top_p, 0.9f);
  EXPECT_EQ(c.output.n, 2);
  EXPECT_EQ(c.stop.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(c.sampling.seed, static_cast<std::uint64_t>(-3));
  EXPECT_TRUE(c.echo);
  EXPECT_FLOAT_EQ(c.sampling.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(c.sampling.frequency_penalty, -0.5f);
  EXPECT_TRUE(c.output.stream);
  EXPECT_TRUE(c.output.include_usage);
  EXPECT_EQ(c.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(c.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(c.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(c.stop.min_tokens, 4);
  EXPECT_EQ(c.stop.stop_token_ids, (std::vector<std::int32_t>{5, 7}));
  EXPECT_TRUE(c.stop.ignore_eos);
  EXPECT_FALSE(c.stop.skip_special_tokens);
  EXPECT_TRUE(c.stop.include_stop_str_in_output);
  EXPECT_TRUE(c.output.return_token_ids);
  EXPECT_FALSE(c.sampling.logprobs.has_value());
}

TEST(CompletionParse, Defaults) {
  auto r = completion({{"prompt", "x"}});
  ASSERT_TRUE(r.ok());
  const CompletionRequest& c = r.value();
  EXPECT_EQ(c.model, "");
  EXPECT_EQ(c.stop.max_tokens, 16);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(c.sampling.top_p, 1.0f);
  EXPECT_EQ(c.sampling.top_k, 0);
  EXPECT_EQ(c.output.n, 1);
  EXPECT_FALSE(c.output.stream);
  EXPECT_FALSE(c.sampling.seed.has_value());
  EXPECT_TRUE(c.stop.skip_special_tokens);
  EXPECT_TRUE(c.add_special_tokens);
}

TEST(CompletionParse, NullMeansNotGiven) {
  auto r = completion({{"prompt", "x"},
                       {"max_tokens", nullptr},
                       {"temperature", nullptr},
                       {"stop", nullptr},
                       {"seed", nullptr},
                       {"logprobs", nullptr},
                       {"stream_options", nullptr}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->stop.max_tokens, 16);
  EXPECT_FALSE(r->sampling.logprobs.has_value());
}

TEST(CompletionParse, PromptForms) {
  auto one = completion({{"prompt", {1, 2, 3}}});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->prompts.size(), 1u);
  EXPECT_TRUE(one->prompts[0].is_token_ids);
  EXPECT_EQ(one->prompts[0].token_ids, (std::vector<std::int32_t>{1, 2, 3}));

  auto strings = completion({{"prompt", {"a", "b"}}});
  ASSERT_TRUE(strings.ok());
  ASSERT_EQ(strings->prompts.size(), 2u);
  EXPECT_EQ(strings->prompts[1].text, "b");

  auto lists = completion({{"prompt", {{1, 2}, {3}}}});
  ASSERT_TRUE(lists.ok());
  ASSERT_EQ(lists->prompts.size(), 2u);
  EXPECT_EQ(lists->prompts[1].token_ids, (std::vector<std::int32_t>{3}));
}

TEST(CompletionParse, EmptyPrompts) {
  expect_bad(completion({{"prompt", ""}}), "prompt");
  expect_bad(completion({{"prompt", json::array()}}), "prompt");
  expect_bad(completion({{"prompt", {""}}}), "prompt");
  expect_bad(completion({{"prompt", {json::array()}}}), "prompt");
  expect_bad(completion({{"prompt", nullptr}}), "prompt");
  expect_bad(completion({{"model", "m"}}), "prompt");
}

TEST(CompletionParse, WrongTypes) {
  expect_bad(completion({{"prompt", 5}}), "prompt");
  expect_bad(completion({{"prompt", {"a", 1}}}), "prompt");
  expect_bad(completion({{"prompt", {1, "a"}}}), "prompt");
  expect_bad(completion({{"prompt", {1.5}}}), "prompt");
  expect_bad(completion({{"prompt", {{1}, "a"}}}), "prompt");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", "16"}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", 16.5}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", true}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"temperature", "hot"}}), "temperature");
  expect_bad(completion({{"prompt", "x"}, {"stream", 1}}), "stream");
  expect_bad(completion({{"prompt", "x"}, {"echo", "yes"}}), "echo");
  expect_bad(completion({{"prompt", "x"}, {"stop", 3}}), "stop");
  expect_bad(completion({{"prompt", "x"}, {"stop", {"a", 3}}}), "stop");
  expect_bad(completion({{"prompt", "x"}, {"seed", 1.5}}), "seed");
  expect_bad(completion({{"prompt", "x"}, {"logprobs", true}}), "logprobs");
  expect_bad(completion({{"prompt", "x"}, {"model", 3}}), "model");
  expect_bad(completion({{"prompt", "x"}, {"stop_token_ids", 3}}), "stop_token_ids");
  expect_bad(completion({{"prompt", "x"}, {"stream", true}, {"stream_options", "yes"}}),
             "stream_options");
  expect_bad(completion({{"prompt", "x"}, {"user", 5}}), "user");
}

TEST(CompletionParse, OutOfRange) {
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", 0}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", -1}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", 2049}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", 18446744073709551615ull}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"temperature", -0.1}}), "temperature");
  expect_bad(completion({{"prompt", "x"}, {"temperature", 2.5}}), "temperature");
  expect_bad(completion({{"prompt", "x"}, {"top_p", 0}}), "top_p");
  expect_bad(completion({{"prompt", "x"}, {"top_p", 1.01}}), "top_p");
  expect_bad(completion({{"prompt", "x"}, {"top_k", -2}}), "top_k");
  expect_bad(completion({{"prompt", "x"}, {"min_p", 1.5}}), "min_p");
  expect_bad(completion({{"prompt", "x"}, {"repetition_penalty", 0}}), "repetition_penalty");
  expect_bad(completion({{"prompt", "x"}, {"presence_penalty", 2.1}}), "presence_penalty");
  expect_bad(completion({{"prompt", "x"}, {"frequency_penalty", -3}}), "frequency_penalty");
  expect_bad(completion({{"prompt", "x"}, {"n", 0}}), "n");
  expect_bad(completion({{"prompt", "x"}, {"n", 129}}), "n");
  expect_bad(completion({{"prompt", "x"}, {"logprobs", 21}}), "logprobs");
  expect_bad(completion({{"prompt", "x"}, {"logprobs", -1}}), "logprobs");
  expect_bad(completion({{"prompt", "x"}, {"min_tokens", 17}}), "min_tokens");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", 4}, {"min_tokens", 5}}), "min_tokens");
  expect_bad(completion({{"prompt", {1, 1000}}}), "prompt");
  expect_bad(completion({{"prompt", {-1}}}), "prompt");
  expect_bad(completion({{"prompt", "x"}, {"stop_token_ids", {1000}}}), "stop_token_ids");
  expect_bad(completion({{"prompt", "x"}, {"stop", {""}}}), "stop");
  // 1e400 does not fit a double: a plain 400.
  expect_bad(parse_completion_request(R"({"prompt":"x","temperature":1e400})", limits()));
  // A batch too large for one request (9 prompts x 128 choices).
  expect_bad(completion({{"prompt", json::array({"a", "b", "c", "d", "e", "f", "g", "h", "i"})},
                         {"n", 128}}),
             "n");
  // top_k -1 means off, as in vLLM.
  auto off = completion({{"prompt", "x"}, {"top_k", -1}});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->sampling.top_k, 0);
}

TEST(CompletionParse, UnsupportedFeaturesSaidPlainly) {
  auto check = [](const json& extra, const std::string& param) {
    json body = {{"prompt", "x"}};
    body.update(extra);
    auto r = completion(body);
    expect_bad(r, param);
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("not supported"), std::string::npos);
    }
  };
  check({{"suffix", "end"}}, "suffix");
  check({{"best_of", 3}}, "best_of");
  check({{"use_beam_search", true}}, "use_beam_search");
  check({{"structured_outputs", {{"whitespace_pattern", " "}}}},
        "structured_outputs.whitespace_pattern");
  // The "off" values of those fields pass.
  EXPECT_TRUE(completion({{"prompt", "x"},
                          {"response_format", {{"type", "text"}}},
                          {"logit_bias", json::object()},
                          {"best_of", 1},
                          {"use_beam_search", false},
                          {"suffix", ""}})
                  .ok());
}

// Prompt logprobs: echo + logprobs scores the prompt with the output's top-N
// (the larger count wins with prompt_logprobs); max_tokens 0 only scores;
// vLLM's prompt_logprobs is never streamed.
TEST(CompletionParse, PromptLogprobs) {
  auto echo = completion({{"prompt", "x"}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 0}});
  ASSERT_TRUE(echo.ok()) << echo.error().message;
  EXPECT_TRUE(echo->echo_logprobs);
  EXPECT_EQ(echo->sampling.prompt_logprobs, 2);
  EXPECT_EQ(echo->stop.max_tokens, 0);
  EXPECT_FALSE(echo->output.prompt_logprobs);  // vLLM's field: not asked for
  auto both =
      completion({{"prompt", "x"}, {"echo", true}, {"logprobs", 1}, {"prompt_logprobs", 4}});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->sampling.prompt_logprobs, 4);
  EXPECT_EQ(both->output.prompt_logprobs, 4);
  auto plain_echo = completion({{"prompt", "x"}, {"echo", true}});
  ASSERT_TRUE(plain_echo.ok());
  EXPECT_FALSE(plain_echo->echo_logprobs);
  EXPECT_FALSE(plain_echo->sampling.prompt_logprobs);
  auto streamed_echo =
      completion({{"prompt", "x"}, {"echo", true}, {"logprobs", 0}, {"stream", true}});
  EXPECT_TRUE(streamed_echo.ok());
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", 0}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", 0}, {"echo", true}}), "max_tokens");
  expect_bad(completion({{"prompt", "x"}, {"prompt_logprobs", 1}, {"stream", true}}),
             "prompt_logprobs");
  expect_bad(completion({{"prompt", "x"}, {"prompt_logprobs", 21}}), "prompt_logprobs");
  expect_bad(completion({{"prompt", "x"}, {"prompt_logprobs", -1}}), "prompt_logprobs");
  expect_bad(completion({{"prompt", "x"}, {"max_tokens", -1}}), "max_tokens");
}

TEST(ChatParse, PromptLogprobs) {
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  auto r = chat({{"messages", messages}, {"prompt_logprobs", 3}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->sampling.prompt_logprobs, 3);
  EXPECT_EQ(r->output.prompt_logprobs, 3);
  expect_bad(chat({{"messages", messages}, {"prompt_logprobs", 0}, {"stream", true}}),
             "prompt_logprobs");
  expect_bad(chat({{"messages", messages}, {"max_tokens", 0}}), "max_tokens");
}

TEST(CompletionParse, LogitBias) {
  auto r = completion({{"prompt", "x"}, {"logit_bias", {{"5", 10}, {"999", -100}, {"0", 0.5}}}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::map<std::int32_t, float> got;
  for (const kernels::LogitBias& b : r->sampling.logit_bias) got[b.token] = b.bias;
  EXPECT_EQ(got, (std::map<std::int32_t, float>{{0, 0.5f}, {5, 10.0f}, {999, -100.0f}}));
  EXPECT_EQ(r->sampling.logit_bias.size(), 3u);
  // "7" and "+7" name one token: the later value wins, as in a Python dict.
  auto dup = parse_completion_request(R"({"prompt":"x","logit_bias":{"7":1,"+7":2}})", limits());
  ASSERT_TRUE(dup.ok()) << dup.error().message;
  ASSERT_EQ(dup->sampling.logit_bias.size(), 1u);
  EXPECT_EQ(dup->sampling.logit_bias[0].bias, 2.0f);
  // Chat takes it too.
  auto c =
      chat({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"logit_bias", {{"3", 1}}}});
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_EQ(c->sampling.logit_bias.size(), 1u);
  EXPECT_EQ(c->sampling.logit_bias[0].token, 3);
  // null and {} are no bias.
  auto none = completion({{"prompt", "x"}, {"logit_bias", nullptr}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->sampling.logit_bias.empty());

  auto bad = [](const json& bias, const std::string& needle) {
    auto r = completion({{"prompt", "x"}, {"logit_bias", bias}});
    expect_bad(r, "logit_bias");
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    }
  };
  bad({{"1000", 1}}, "1000");  // outside the vocabulary [0, 1000)
  bad({{"-1", 1}}, "-1");
  bad({{"abc", 1}}, "abc");
  bad({{"5x", 1}}, "5x");
  bad({{"", 1}}, "token ids");
  bad({{"1.5", 1}}, "1.5");
  bad({{"99999999999999999999", 1}}, "99999999999999999999");
  bad({{"5", 100.5}}, "[-100, 100]");
  bad({{"5", -101}}, "[-100, 100]");
  bad({{"5", "1"}}, "a number");
  bad({{"5", nullptr}}, "a number");
  bad(json::array({1, 2}), "an object");
  bad("5", "an object");
  json many = json::object();
  for (int i = 0; i <= engine::kMaxLogitBiasEntries; ++i) many[std::to_string(i)] = 1;
  bad(many, "at most 300");
  many.erase("0");
  auto limit = completion({{"prompt", "x"}, {"logit_bias", many}});
  ASSERT_TRUE(limit.ok()) << limit.error().message;
  EXPECT_EQ(limit->sampling.logit_bias.size(), 300u);
}

TEST(CompletionParse, StreamOptionsNeedStream) {
  expect_bad(completion({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}),
             "stream_options");
}

TEST(CompletionParse, MalformedBodies) {
  const RequestLimits l = limits();
  for (std::string body :
       {"", "{", "{\"prompt\": }", "[1, 2]", "\"prompt\"", "null", "42",
        "{\"prompt\": \"x\"} trailing", "{'prompt': 'x'}", "{\"prompt\": \"x\",}"}) {
    auto r = parse_completion_request(body, l);
    expect_bad(r);
  }
}

TEST(CompletionParse, InvalidUtf8) {
  const RequestLimits l = limits();
  expect_bad(parse_completion_request("{\"prompt\": \"a\xff\"}", l));
  expect_bad(parse_completion_request("{\"prompt\": \"\xc0\xaf\"}", l));      // overlong
  expect_bad(parse_completion_request("{\"prompt\": \"\xed\xa0\x80\"}", l));  // surrogate
  expect_bad(parse_completion_request(R"({"prompt": "\ud800"})", l));         // lone escape
  expect_bad(parse_completion_request("{\"prompt\": \"\xe2\x82\"}", l));      // truncated
  auto ok = parse_completion_request("{\"prompt\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}", l);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->prompts[0].text, "caf\xc3\xa9 \xf0\x9f\x98\x80");
}

TEST(CompletionParse, DeepNestingRefused) {
  std::string deep =
      "{\"prompt\": \"x\", \"extra\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_bad(parse_completion_request(deep, limits()));
  // Brackets inside strings do not count.
  std::string quoted = "{\"prompt\": \"" + std::string(1000, '[') + "\"}";
  EXPECT_TRUE(parse_completion_request(quoted, limits()).ok());
}

TEST(ChatParse, MessagesAndFields) {
  auto r = chat(
      {{"model", "m"},
       {"messages",
        {{{"role", "system"}, {"content", "be brief"}},
         {{"role", "user"},
          {"content",
           {{{"type", "text"}, {"text", "part one"}}, {{"type", "text"}, {"text", "part two"}}}},
          {"name", "ann"}},
         {{"role", "assistant"}, {"content", nullptr}},
         {{"role", "user"}, {"content", "go"}}}},
       {"max_tokens", 10},
       {"max_completion_tokens", 20},
       {"logprobs", true},
       {"top_logprobs", 3},
       {"add_generation_prompt", true},
       {"tool_choice", "none"}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ChatRequest& c = r.value();
  ASSERT_EQ(c.messages.size(), 4u);
  EXPECT_EQ(c.messages[0]["role"], "system");
  EXPECT_EQ(c.messages[0]["content"], "be brief");
  // Text parts pass through (the template decides how to join them).
  EXPECT_EQ(c.messages[1]["content"].size(), 2u);
  EXPECT_EQ(c.messages[1]["content"][1]["text"], "part two");
  EXPECT_EQ(c.messages[1]["name"], "ann");
  EXPECT_EQ(c.messages[2]["content"], "");
  EXPECT_EQ(c.max_tokens, 20);  // max_completion_tokens wins
  EXPECT_EQ(c.sampling.logprobs, 3);
  EXPECT_FALSE(c.add_special_tokens);
  EXPECT_TRUE(c.chat_template.add_generation_prompt);

  auto plain = chat({{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"logprobs", true},
                     {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->sampling.logprobs, 0);
  EXPECT_FALSE(plain->max_tokens.has_value());
  EXPECT_EQ(plain->chat_template.extra_vars["enable_thinking"], false);
}

TEST(ChatParse, ToolCallHistoryArgumentsBecomeObjectsInOrder) {
  // A replayed tool call: `arguments` arrives as a JSON string and reaches the
  // template as an object whose keys keep their order (templates tojson it).
  const std::string body = R"({"messages": [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"zeta\": 1, \"alpha\": [true]}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]})";
  auto r = parse_chat_request(body, limits());
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& m = r->messages;
  ASSERT_EQ(m.size(), 3u);
  const auto& call = m[1]["tool_calls"][0];
  EXPECT_EQ(call["id"], "call_1");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  ASSERT_TRUE(call["function"]["arguments"].is_object());
  EXPECT_EQ(call["function"]["arguments"].dump(), R"({"zeta":1,"alpha":[true]})");
  EXPECT_EQ(m[1]["content"], "");
  EXPECT_EQ(m[2]["tool_call_id"], "call_1");
  // What a Llama-3.1-style template makes of it: the object, in order.
  auto tmpl = tokenizer::ChatTemplate::from_config(
      {{"chat_template",
        "{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | "
        "tojson }}{% endif %}{% endfor %}"}});
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  auto text = tmpl->render(m, /*add_generation_prompt=*/false);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(text.value(), R"({"zeta": 1, "alpha": [true]})");

  const json user = {{"role", "user"}, {"content", "hi"}};
  const auto with_calls = [&](json calls, std::string role = "assistant") {
    return chat({{"messages",
                  {user, {{"role", role}, {"content", "x"}, {"tool_calls", std::move(calls)}}}}});
  };
  const json fn = {{"name", "f"}, {"arguments", "{}"}};
  EXPECT_TRUE(with_calls({{{"type", "function"}, {"function", fn}}}).ok());
  expect_bad(with_calls({{{"type", "function"}, {"function", fn}}}, "user"), "messages");
  expect_bad(with_calls("f"), "messages");
  expect_bad(with_calls({{{"type", "code"}, {"function", fn}}}), "messages");
  expect_bad(with_calls({{{"type", "function"}}}), "messages");
  expect_bad(with_calls({{{"function", {{"arguments", "{}"}}}}}), "messages");
  expect_bad(with_calls({{{"function", {{"name", "f"}, {"arguments", "{not json"}}}}}), "messages");
  expect_bad(with_calls({{{"function", {{"name", "f"}, {"arguments", 5}}}}}), "messages");
  expect_bad(with_calls({{{"function", {{"name", "f"}, {"arguments", std::string(100, '[')}}}}}),
             "messages");
  expect_bad(chat({{"messages", {{{"role", "tool"}, {"content", "x"}, {"tool_call_id", 3}}}}}),
             "messages");
}

TEST(ChatParse, Errors) {
  const json user = {{"role", "user"}, {"content", "hi"}};
  expect_bad(chat({{"model", "m"}}), "messages");
  expect_bad(chat({{"messages", json::array()}}), "messages");
  expect_bad(chat({{"messages", "hi"}}), "messages");
  expect_bad(chat({{"messages", {"hi"}}}), "messages");
  expect_bad(chat({{"messages", {{{"content", "hi"}}}}}), "messages");
  expect_bad(chat({{"messages", {{{"role", "wizard"}, {"content", "hi"}}}}}), "messages");
  expect_bad(chat({{"messages", {{{"role", "user"}}}}}), "messages");
  expect_bad(chat({{"messages", {{{"role", "user"}, {"content", 5}}}}}), "messages");
  expect_bad(chat({{"messages",
                    {{{"role", "user"},
                      {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}}}}),
             "messages");
  expect_bad(chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}}}}}}}}),
             "messages");
  expect_bad(chat({{"messages", {user}}, {"top_logprobs", 2}}), "top_logprobs");
  expect_bad(chat({{"messages", {user}}, {"logprobs", true}, {"top_logprobs", 21}}),
             "top_logprobs");
  expect_bad(chat({{"messages", {user}}, {"max_completion_tokens", 0}}), "max_completion_tokens");
  expect_bad(chat({{"messages", {user}}, {"logprobs", 1}}), "logprobs");
  expect_bad(chat({{"messages", {user}}, {"tools", {{{"type", "function"}}}}}),
             "tools[0].function");
  expect_bad(chat({{"messages", {user}}, {"tool_choice", "auto"}}), "tool_choice");
  expect_bad(chat({{"messages", {user}}, {"functions", {{{"name", "f"}}}}}), "functions");
  expect_bad(chat({{"messages", {user}}, {"response_format", {{"type", "json_schema"}}}}),
             "response_format.json_schema");
  expect_bad(chat({{"messages", {user}}, {"continue_final_message", true}}),
             "continue_final_message");
  expect_bad(chat({{"messages", {user}}, {"chat_template", "{{ x }}"}}), "chat_template");
  expect_bad(chat({{"messages", {user}}, {"chat_template_kwargs", "x"}}), "chat_template_kwargs");
  // Unknown fields are ignored.
  EXPECT_TRUE(chat({{"messages", {user}}, {"frobnicate", {1, 2, 3}}}).ok());
}

// vLLM's cache_salt: a non-empty string; null or absent means none.
TEST(CacheSaltParse, BothEndpoints) {
  const json user = {{"role", "user"}, {"content", "hi"}};
  auto c = completion({{"prompt", "x"}, {"cache_salt", "tenant-7"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cache_salt, "tenant-7");
  auto h = chat({{"messages", {user}}, {"cache_salt", "tenant-8"}});
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->cache_salt, "tenant-8");
  auto absent = completion({{"prompt", "x"}});
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(absent->cache_salt, "");
  auto null_salt = completion({{"prompt", "x"}, {"cache_salt", nullptr}});
  ASSERT_TRUE(null_salt.ok());
  EXPECT_EQ(null_salt->cache_salt, "");
  for (const json& bad : {json(""), json(5), json(true), json::array({"a"}), json::object()}) {
    SCOPED_TRACE(bad.dump());
    expect_bad(completion({{"prompt", "x"}, {"cache_salt", bad}}), "cache_salt");
    expect_bad(chat({{"messages", {user}}, {"cache_salt", bad}}), "cache_salt");
  }
  auto empty = completion({{"prompt", "x"}, {"cache_salt", ""}});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("non-empty string"), std::string::npos)
      << empty.error().message;
}

TEST(TokenizeParse, PromptAndMessages) {
  auto p = parse_tokenize_request(R"({"prompt": "hello"})", limits());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->is_chat);
  EXPECT_TRUE(p->add_special_tokens);
  auto m = parse_tokenize_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false,
          "return_token_strs": true})",
      limits());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE(m->is_chat);
  EXPECT_FALSE(m->add_special_tokens);
  EXPECT_FALSE(m->chat_template.add_generation_prompt);
  EXPECT_TRUE(m->return_token_strs);
  expect_bad(parse_tokenize_request("{}", limits()));
  expect_bad(parse_tokenize_request(R"({"prompt": "a", "messages": []})", limits()));
  expect_bad(parse_tokenize_request(R"({"prompt": 5})", limits()), "prompt");

  auto d = parse_detokenize_request(R"({"tokens": [1, 2, 999]})", limits());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<std::int32_t>{1, 2, 999}));
  expect_bad(parse_detokenize_request(R"({"tokens": [1000]})", limits()), "tokens");
  expect_bad(parse_detokenize_request(R"({"tokens": "abc"})", limits()), "tokens");
  expect_bad(parse_detokenize_request(R"({})", limits()), "tokens");
}

// Random bodies, built and mutated: parsing never crashes and every failure
// is a 400 with a message; every success honours the limits.
TEST(RequestParseFuzz, RandomBodiesGiveValidErrors) {
  const RequestLimits l = limits();
  testing::RandomJson gen(1234, {"prompt",         "messages",
                                 "max_tokens",     "temperature",
                                 "top_p",          "n",
                                 "stop",           "seed",
                                 "echo",           "logprobs",
                                 "top_logprobs",   "stream",
                                 "stream_options", "top_k",
                                 "min_p",          "repetition_penalty",
                                 "min_tokens",     "stop_token_ids",
                                 "ignore_eos",     "response_format",
                                 "tools",          "max_completion_tokens",
                                 "model",          "role",
                                 "content",        "type",
                                 "text",           "tokens"});
  int accepted = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    json body = json::object();
    if (gen.rng()() % 2) body["prompt"] = gen.value();
    if (gen.rng()() % 2) body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
    for (int i = 0, k = static_cast<int>(gen.rng()() % 6); i < k; ++i)
      body[gen.key()] = gen.value();
    const std::string text = gen.mutate(body.dump());
    auto check = [&](const auto& r) {
      if (r.ok()) {
        ++accepted;
        return;
      }
      EXPECT_EQ(r.error().http_status, 400);
      EXPECT_FALSE(r.error().message.empty());
      const json e = json::parse(error_body(r.error()));
      EXPECT_TRUE(e["error"]["message"].is_string());
    };
    auto c = parse_completion_request(text, l);
    check(c);
    if (c.ok()) {
      EXPECT_GE(c->stop.max_tokens, 1);
      EXPECT_LE(c->stop.max_tokens, l.max_model_len);
      EXPECT_FALSE(c->prompts.empty());
    }
    check(parse_chat_request(text, l));
    check(parse_tokenize_request(text, l));
    check(parse_detokenize_request(text, l));
  }
  EXPECT_GT(accepted, 100);  // the generator also makes valid bodies
}

TEST(SamplingDefaults, FillWhatTheRequestLeavesOut) {
  RequestLimits l = limits();
  l.sampling_defaults.temperature = 0.6f;
  l.sampling_defaults.top_p = 0.9f;
  l.sampling_defaults.top_k = 20;
  l.sampling_defaults.min_p = 0.05f;
  l.sampling_defaults.repetition_penalty = 1.1f;
  auto r = parse_completion_request(json({{"prompt", "x"}}).dump(), l);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.repetition_penalty, 1.1f);
  // What the request sets wins (null means not given).
  auto c = parse_chat_request(json({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                    {"temperature", 0.0},
                                    {"top_p", nullptr},
                                    {"top_k", -1},
                                    {"min_p", 0.0},
                                    {"repetition_penalty", 1.0}})
                                  .dump(),
                              l);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_FLOAT_EQ(c->sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(c->sampling.top_p, 0.9f);
  EXPECT_EQ(c->sampling.top_k, 0);
  EXPECT_FLOAT_EQ(c->sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(c->sampling.repetition_penalty, 1.0f);
}

TEST(MaxLogprobs, AboveTheLimitIs400NamingIt) {
  RequestLimits l = limits();
  l.max_logprobs = 5;
  auto r = parse_completion_request(json({{"prompt", "x"}, {"logprobs", 6}}).dump(), l);
  expect_bad(r, "logprobs");
  EXPECT_NE(r.error().message.find("between 0 and 5"), std::string::npos) << r.error().message;
  EXPECT_TRUE(parse_completion_request(json({{"prompt", "x"}, {"logprobs", 5}}).dump(), l).ok());
  auto c = parse_chat_request(json({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                    {"logprobs", true},
                                    {"top_logprobs", 6}})
                                  .dump(),
                              l);
  expect_bad(c, "top_logprobs");
  EXPECT_NE(c.error().message.find("between 0 and 5"), std::string::npos) << c.error().message;
}

TEST(StreamOptions, ContinuousUsageStatsGoesWithIncludeUsage) {
  const auto parse = [](const json& options) {
    auto r = completion({{"prompt", "x"}, {"stream", true}, {"stream_options", options}});
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? r->output : OutputOptions{};
  };
  OutputOptions o = parse({{"include_usage", true}, {"continuous_usage_stats", true}});
  EXPECT_TRUE(o.include_usage);
  EXPECT_TRUE(o.continuous_usage);
  // As in vLLM, continuous stats are part of include_usage.
  EXPECT_FALSE(parse({{"continuous_usage_stats", true}}).continuous_usage);
  EXPECT_FALSE(parse({{"include_usage", true}}).continuous_usage);
  expect_bad(completion({{"prompt", "x"},
                         {"stream", true},
                         {"stream_options", {{"continuous_usage_stats", "yes"}}}}),
             "continuous_usage_stats");
}

TEST(ChatParse, ToolsReachTheTemplate) {
  const json tools = {
      {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}};
  auto r = chat({{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"tools", tools},
                 {"tool_choice", "required"},
                 {"parallel_tool_calls", false}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tools.choice, ToolChoice::required);
  EXPECT_FALSE(r->tools.parallel_tool_calls);
  EXPECT_EQ(r->chat_template.tools, tools);
  // tool_choice none: the tools are still rendered.
  r = chat({{"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"tools", tools},
            {"tool_choice", "none"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->chat_template.tools, tools);
  // /tokenize renders them too.
  auto t = parse_tokenize_request(
      json({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", tools}}).dump(),
      limits());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->chat_template.tools, tools);
}

}  // namespace
}  // namespace vpod::server

namespace vpod::server {
namespace {

// response_format, structured_outputs and guided_* into one Constraint
// (structured_output_parse.h); whether it compiles is the engine's check.
TEST(StructuredOutputParse, EverySpellingOnBothEndpoints) {
  using grammar::ConstraintKind;
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  struct Case {
    json extra;
    ConstraintKind kind;
    std::string spec;
    bool strict;
  };
  const std::string sch = schema.dump();
  auto with_schema = [&](std::string text) {
    for (std::size_t at; (at = text.find("SCHEMA")) != std::string::npos;) text.replace(at, 6, sch);
    return json::parse(text);
  };
  const std::vector<Case> cases = {
      {json::parse(R"({"response_format": {"type": "text"}})"), ConstraintKind::none, "", true},
      {json::parse(R"({"response_format": {"type": "json_object"}})"), ConstraintKind::json_object,
       "", false},
      {with_schema(R"({"response_format": {"type": "json_schema",
                        "json_schema": {"name": "n", "schema": SCHEMA, "strict": true}}})"),
       ConstraintKind::json_schema, sch, true},
      {with_schema(
           R"({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}})"),
       ConstraintKind::json_schema, sch, false},
      {with_schema(R"({"structured_outputs": {"json": SCHEMA}})"), ConstraintKind::json_schema, sch,
       true},
      {json{{"guided_json", sch}}, ConstraintKind::json_schema, sch, true},
      {json::parse(R"({"structured_outputs": {"regex": "a+"}})"), ConstraintKind::regex, "a+",
       true},
      {json::parse(R"({"guided_regex": "a+"})"), ConstraintKind::regex, "a+", true},
      {json::parse(R"({"guided_choice": ["x", "y"]})"), ConstraintKind::choice, R"(["x","y"])",
       true},
      {json::parse(R"({"structured_outputs": {"grammar": "root ::= \"a\""}})"),
       ConstraintKind::ebnf, "root ::= \"a\"", true},
      {json::parse(R"({"structured_outputs": {"json_object": true}})"), ConstraintKind::json_object,
       "", false},
      {json::parse(R"({"structured_outputs": {"json_object": false}})"), ConstraintKind::none, "",
       true},
      {json::parse(R"({"guided_decoding_backend": "xgrammar"})"), ConstraintKind::none, "", true},
  };
  for (const Case& c : cases) {
    json body = {{"prompt", "x"}};
    body.update(c.extra);
    auto r = completion(body);
    ASSERT_TRUE(r.ok()) << c.extra.dump() << ": " << r.error().message;
    EXPECT_EQ(r->constraint.kind, c.kind) << c.extra.dump();
    EXPECT_EQ(r->constraint.spec, c.spec) << c.extra.dump();
    if (c.kind == ConstraintKind::json_schema) {
      EXPECT_EQ(r->constraint.strict, c.strict);
    }
    json chat_body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
    chat_body.update(c.extra);
    auto rc = chat(chat_body);
    ASSERT_TRUE(rc.ok()) << c.extra.dump() << ": " << rc.error().message;
    EXPECT_EQ(rc->constraint.kind, c.kind) << c.extra.dump();
  }
}

TEST(StructuredOutputParse, BadShapesAndTwoConstraintsAre400s) {
  auto bad = [](const json& extra, const std::string& param) {
    json body = {{"prompt", "x"}};
    body.update(extra);
    expect_bad(completion(body), param);
  };
  bad({{"response_format", "json"}}, "response_format");
  bad({{"response_format", {{"type", "xml"}}}}, "response_format.type");
  bad({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}}}}}},
      "response_format.json_schema.schema");
  bad({{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}, {"strict", 1}}}}}},
      "response_format.json_schema.strict");
  bad({{"guided_json", "{not json"}}, "guided_json");
  bad({{"guided_json", 5}}, "guided_json");
  bad({{"guided_regex", ""}}, "guided_regex");
  bad({{"guided_choice", json::array()}}, "guided_choice");
  bad({{"guided_choice", {"a", 1}}}, "guided_choice");
  bad({{"structured_outputs", "json"}}, "structured_outputs");
  bad({{"structured_outputs", {{"json_object", "yes"}}}}, "structured_outputs.json_object");
  bad({{"guided_whitespace_pattern", " "}}, "guided_whitespace_pattern");
  bad({{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}, "guided_regex");
  bad({{"structured_outputs", {{"regex", "a"}, {"choice", {"a"}}}}}, "structured_outputs.choice");
  // disable_any_whitespace: a boolean, and for JSON only.
  bad({{"structured_outputs", {{"json_object", true}, {"disable_any_whitespace", "yes"}}}},
      "structured_outputs.disable_any_whitespace");
  bad({{"structured_outputs", {{"regex", "a+"}, {"disable_any_whitespace", true}}}},
      "structured_outputs.disable_any_whitespace");
  bad({{"structured_outputs", {{"disable_any_whitespace", true}}}},
      "structured_outputs.disable_any_whitespace");
}

// vLLM's structured_outputs.disable_any_whitespace: compact JSON for any
// JSON constraint of the request (also response_format and guided_json).
TEST(StructuredOutputParse, DisableAnyWhitespaceMakesJsonCompact) {
  const json schema = {{"type", "object"}};
  for (const json& extra :
       {json{{"structured_outputs", {{"json", schema}, {"disable_any_whitespace", true}}}},
        json{{"structured_outputs", {{"json_object", true}, {"disable_any_whitespace", true}}}},
        json{{"response_format", {{"type", "json_object"}}},
             {"structured_outputs", {{"disable_any_whitespace", true}}}},
        json{{"guided_json", schema},
             {"structured_outputs", {{"disable_any_whitespace", true}}}}}) {
    json body = {{"prompt", "x"}};
    body.update(extra);
    auto r = completion(body);
    ASSERT_TRUE(r.ok()) << extra.dump() << ": " << r.error().message;
    EXPECT_TRUE(r->constraint.active()) << extra.dump();
    EXPECT_FALSE(r->constraint.any_whitespace) << extra.dump();
  }
  auto spaced =
      completion({{"prompt", "x"},
                  {"structured_outputs", {{"json", schema}, {"disable_any_whitespace", false}}}});
  ASSERT_TRUE(spaced.ok());
  EXPECT_TRUE(spaced->constraint.any_whitespace);
}

}  // namespace
}  // namespace vpod::server
