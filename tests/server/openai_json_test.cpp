#include "server/openai_json.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/metrics.h"
#include "server/metrics.h"

namespace vpod::server {
namespace {

using nlohmann::json;

// Token t stands for the bytes "<t>", except 7 and 8 which are the two
// halves of "é" (0xC3 0xA9), as byte-level tokenizers split characters.
std::string token_bytes(std::int32_t t) {
  if (t == 7) return "\xc3";
  if (t == 8) return "\xa9";
  std::string bytes = "<";
  bytes += std::to_string(t);
  bytes += '>';
  return bytes;
}

engine::SampledToken sampled(std::int32_t id, float logprob,
                             std::vector<engine::TokenLogprob> top) {
  engine::SampledToken t;
  t.token = id;
  t.logprob = logprob;
  t.num_top = static_cast<int>(top.size());
  std::copy(top.begin(), top.end(), t.top.begin());
  return t;
}

engine::RequestOutput delta(std::vector<std::int32_t> ids, std::string text, int generated,
                            bool with_logprobs = false) {
  engine::RequestOutput d;
  d.token_ids = ids;
  d.text = std::move(text);
  if (with_logprobs) {
    for (std::int32_t id : ids)
      d.logprobs.push_back(sampled(id, -0.5f, {{id, -0.5f}, {id + 1, -1.5f}}));
  }
  d.num_prompt_tokens = 3;
  d.num_generated_tokens = generated;
  return d;
}

using engine::FinishReason;

engine::RequestOutput finish(engine::RequestOutput d, FinishReason reason) {
  d.finished = true;
  d.finish_reason = reason;
  return d;
}

// add() takes the delta by reference (it may prepend echo text).
std::string add(ResponseBuilder& b, int choice, engine::RequestOutput d) {
  return b.add(choice, d);
}

// Splits an SSE stream into its data payloads.
std::vector<std::string> sse_payloads(const std::string& stream) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < stream.size()) {
    const std::size_t end = stream.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    const std::string event = stream.substr(pos, end - pos);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

ResponseOptions options(Endpoint endpoint, bool stream) {
  ResponseOptions o;
  o.endpoint = endpoint;
  o.id = endpoint == Endpoint::chat ? "chatcmpl-1" : "cmpl-1";
  o.created = 1700000000;
  o.model = "tiny";
  o.stream = stream;
  return o;
}

TEST(ResponseBuilder, CompletionNonStreamedTwoChoices) {
  ResponseOptions o = options(Endpoint::completions, false);
  o.n = 2;
  o.return_token_ids = true;
  o.logprobs = true;
  ResponseBuilder b(o, token_bytes, {{1, 2, 3}});
  ASSERT_EQ(b.num_choices(), 2);
  EXPECT_EQ(add(b, 1, delta({10}, "A", 1, true)), "");
  add(b, 0, delta({20, 21}, "xy", 2, true));
  engine::RequestOutput stop = finish(delta({22}, "z", 3, true), FinishReason::stop);
  stop.stop_string = "STOP";
  add(b, 0, std::move(stop));
  EXPECT_FALSE(b.all_finished());
  add(b, 1, finish(delta({}, "", 1), FinishReason::length));
  ASSERT_TRUE(b.all_finished());

  const json r = b.response();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["id"], "cmpl-1");
  EXPECT_EQ(r["model"], "tiny");
  ASSERT_EQ(r["choices"].size(), 2u);
  const json& c0 = r["choices"][0];
  EXPECT_EQ(c0["index"], 0);
  EXPECT_EQ(c0["text"], "xyz");
  EXPECT_EQ(c0["finish_reason"], "stop");
  EXPECT_EQ(c0["stop_reason"], "STOP");
  EXPECT_EQ(c0["token_ids"], json({20, 21, 22}));
  EXPECT_EQ(c0["prompt_token_ids"], json({1, 2, 3}));
  EXPECT_EQ(c0["logprobs"]["tokens"], json({"<20>", "<21>", "<22>"}));
  EXPECT_EQ(c0["logprobs"]["token_logprobs"], json({-0.5, -0.5, -0.5}));
  EXPECT_EQ(c0["logprobs"]["text_offset"], json({0, 4, 8}));
  EXPECT_EQ(c0["logprobs"]["top_logprobs"][1], json({{"<21>", -0.5}, {"<22>", -1.5}}));
  EXPECT_EQ(r["choices"][1]["text"], "A");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "length");
  EXPECT_TRUE(r["choices"][1]["stop_reason"].is_null());
  EXPECT_EQ(r["usage"], json({{"prompt_tokens", 3},
                              {"completion_tokens", 4},
                              {"total_tokens", 7},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

TEST(ResponseBuilder, ChatStreamRoleWithFirstTokenThenFinalUsageDone) {
  ResponseOptions o = options(Endpoint::chat, true);
  o.include_usage = true;
  ResponseBuilder b(o, token_bytes, {{1, 2, 3, 4}});
  std::string stream;
  // A delta whose text is held back (e.g. a possible stop string) sends nothing.
  EXPECT_EQ(add(b, 0, delta({5}, "", 1)), "");
  stream += add(b, 0, delta({6}, "Hel", 2));
  stream += add(b, 0, delta({7}, "lo", 3));
  stream += add(b, 0, finish(delta({}, "", 3), FinishReason::stop));
  ASSERT_TRUE(b.all_finished());
  stream += b.stream_tail();

  const std::vector<std::string> payloads = sse_payloads(stream);
  ASSERT_EQ(payloads.size(), 5u);
  const json first = json::parse(payloads[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "Hel"}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  const json second = json::parse(payloads[1]);
  EXPECT_EQ(second["choices"][0]["delta"], json({{"content", "lo"}}));
  const json final_chunk = json::parse(payloads[2]);
  EXPECT_EQ(final_chunk["choices"][0]["delta"], json::object());
  EXPECT_EQ(final_chunk["choices"][0]["finish_reason"], "stop");
  const json usage = json::parse(payloads[3]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], json({{"prompt_tokens", 4},
                                  {"completion_tokens", 3},
                                  {"total_tokens", 7},
                                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_EQ(payloads[4], "[DONE]");
}

// Tools and reasoning parsed out of the text: streamed as OpenAI streams
// them (the role on the first chunk, a call's header, then its arguments,
// finish_reason tool_calls), and whole as message fields.
TEST(ResponseBuilder, ChatToolCallsAndReasoning) {
  for (const bool stream : {true, false}) {
    ResponseOptions o = options(Endpoint::chat, stream);
    o.chat_output.tools = chat_output::ToolMode::parse;
    o.chat_output.parser = chat_output::ToolParserKind::hermes;
    o.chat_output.reasoning = chat_output::ReasoningParserKind::qwen3;
    ResponseBuilder b(o, token_bytes, {{1, 2}});
    std::string events;
    events += add(b, 0, delta({5}, "<think>hm</think>\n\n<tool_", 1));
    events += add(b, 0, delta({6}, "call>{\"name\": \"f\", ", 2));
    events += add(b, 0, delta({7}, "\"arguments\": {\"a\": 1}}</tool_call>", 3));
    events += add(b, 0, finish(delta({}, "", 3), FinishReason::stop));
    ASSERT_TRUE(b.all_finished());
    if (!stream) {
      EXPECT_EQ(events, "");
      const json c = b.response()["choices"][0];
      EXPECT_EQ(c["finish_reason"], "tool_calls");
      EXPECT_EQ(c["message"]["role"], "assistant");
      EXPECT_EQ(c["message"]["reasoning_content"], "hm");
      EXPECT_TRUE(c["message"]["content"].is_null());
      ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
      EXPECT_EQ(c["message"]["tool_calls"][0]["type"], "function");
      EXPECT_EQ(c["message"]["tool_calls"][0]["function"],
                json({{"name", "f"}, {"arguments", "{\"a\": 1}"}}));
      continue;
    }
    const std::vector<std::string> payloads = sse_payloads(events);
    ASSERT_EQ(payloads.size(), 4u) << events;
    const json first = json::parse(payloads[0])["choices"][0];
    EXPECT_EQ(first["delta"], json({{"role", "assistant"}, {"reasoning_content", "hm"}}));
    const json header = json::parse(payloads[1])["choices"][0]["delta"];
    ASSERT_EQ(header.size(), 1u) << header;
    const json& call = header["tool_calls"][0];
    EXPECT_EQ(call["index"], 0);
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
    EXPECT_EQ(call["function"], json({{"name", "f"}, {"arguments", ""}}));
    EXPECT_EQ(
        json::parse(payloads[2])["choices"][0]["delta"],
        json({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "{\"a\": 1}"}}}}}}}));
    const json final_chunk = json::parse(payloads[3])["choices"][0];
    EXPECT_EQ(final_chunk["delta"], json::object());
    EXPECT_EQ(final_chunk["finish_reason"], "tool_calls");
  }
}

// usage.prompt_tokens_details.cached_tokens: the engine's count for each
// prompt, taken once per prompt (from its first choice, as prompt_tokens
// counts the prompt once), in the body and in the streamed usage chunk.
TEST(ResponseBuilder, UsageReportsCachedPromptTokens) {
  const auto cached = [](engine::RequestOutput d, int n) {
    d.num_cached_tokens = n;
    return d;
  };
  ResponseOptions o = options(Endpoint::completions, false);
  o.n = 2;
  ResponseBuilder b(o, token_bytes, {{1, 2, 3}, {4, 5, 6}});
  add(b, 0, finish(cached(delta({7}, "a", 1), 2), FinishReason::length));
  add(b, 1, finish(cached(delta({7}, "a", 1), 1), FinishReason::length));
  add(b, 2, finish(cached(delta({8}, "b", 1), 1), FinishReason::length));
  add(b, 3, finish(cached(delta({8}, "b", 1), 2), FinishReason::length));
  ASSERT_TRUE(b.all_finished());
  EXPECT_EQ(b.cached_tokens(), 3);
  const json r = b.response();
  EXPECT_EQ(r["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"], json({{"cached_tokens", 3}}));

  ResponseOptions so = options(Endpoint::chat, true);
  so.include_usage = true;
  ResponseBuilder sb(so, token_bytes, {{1, 2, 3, 4}});
  add(sb, 0, cached(delta({5}, "x", 1), 2));
  add(sb, 0, finish(cached(delta({}, "", 1), 2), FinishReason::stop));
  const std::vector<std::string> payloads = sse_payloads(sb.stream_tail());
  ASSERT_EQ(payloads.size(), 2u);
  EXPECT_EQ(json::parse(payloads[0])["usage"]["prompt_tokens_details"],
            json({{"cached_tokens", 2}}));
}

TEST(ResponseBuilder, ChatStreamWithoutTextStillSendsRole) {
  ResponseBuilder b(options(Endpoint::chat, true), token_bytes, {{1}});
  std::string stream = add(b, 0, finish(delta({2}, "", 1), FinishReason::length));
  stream += b.stream_tail();
  const std::vector<std::string> payloads = sse_payloads(stream);
  ASSERT_EQ(payloads.size(), 2u);  // no usage chunk unless asked
  const json final_chunk = json::parse(payloads[0]);
  EXPECT_EQ(final_chunk["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(final_chunk["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(payloads[1], "[DONE]");
}

TEST(ResponseBuilder, ChatLogprobsShapeWithPartialCharacters) {
  ResponseOptions o = options(Endpoint::chat, false);
  o.logprobs = true;
  ResponseBuilder b(o, token_bytes, {{1}});
  engine::RequestOutput d = delta({7, 8}, "\xc3\xa9", 2);
  d.logprobs.push_back(sampled(7, -0.25f, {{7, -0.25f}}));
  d.logprobs.push_back(sampled(8, -std::numeric_limits<float>::infinity(), {}));
  add(b, 0, finish(std::move(d), FinishReason::stop));
  const json r = b.response();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"], json({{"role", "assistant"}, {"content", "\xc3\xa9"}}));
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  // Half a character: the token text is U+FFFD, the bytes are the raw byte.
  EXPECT_EQ(content[0]["token"], "\xef\xbf\xbd");
  EXPECT_EQ(content[0]["bytes"], json({0xC3}));
  EXPECT_EQ(content[0]["logprob"], -0.25);
  EXPECT_EQ(content[0]["top_logprobs"][0],
            json({{"token", "\xef\xbf\xbd"}, {"logprob", -0.25}, {"bytes", {0xC3}}}));
  EXPECT_EQ(content[1]["bytes"], json({0xA9}));
  EXPECT_EQ(content[1]["logprob"], kMinReportedLogprob);  // -inf is not JSON
  EXPECT_EQ(content[1]["top_logprobs"], json::array());
}

TEST(ResponseBuilder, CompletionStreamEchoTokenIdsAndOffsets) {
  ResponseOptions o = options(Endpoint::completions, true);
  o.return_token_ids = true;
  o.logprobs = true;
  ResponseBuilder b(o, token_bytes, {{1, 2}}, {"Say:"});
  std::string stream = add(b, 0, delta({5}, "<5>", 1, true));
  stream += add(b, 0, finish(delta({6}, "<6>", 2, true), FinishReason::length));
  stream += b.stream_tail();
  const std::vector<std::string> payloads = sse_payloads(stream);
  ASSERT_EQ(payloads.size(), 4u);
  const json c0 = json::parse(payloads[0])["choices"][0];
  EXPECT_EQ(c0["text"], "Say:<5>");
  EXPECT_EQ(c0["prompt_token_ids"], json({1, 2}));
  EXPECT_EQ(c0["token_ids"], json({5}));
  EXPECT_EQ(c0["logprobs"]["text_offset"], json({4}));  // after the echoed prompt
  const json c1 = json::parse(payloads[1])["choices"][0];
  EXPECT_FALSE(c1.contains("prompt_token_ids"));
  EXPECT_EQ(c1["text"], "<6>");
  EXPECT_EQ(c1["logprobs"]["text_offset"], json({7}));
  const json final_chunk = json::parse(payloads[2]);
  EXPECT_EQ(final_chunk["object"], "text_completion");
  EXPECT_EQ(final_chunk["choices"][0]["text"], "");
  EXPECT_EQ(final_chunk["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(payloads[3], "[DONE]");
}

TEST(ResponseBuilder, EngineErrorBecomesErrorEventOr500) {
  ResponseBuilder streamed(options(Endpoint::completions, true), token_bytes, {{1}});
  engine::RequestOutput d = finish(delta({}, "", 0), FinishReason::error);
  d.error = "device lost";
  std::string stream = add(streamed, 0, d);
  stream += streamed.stream_tail();
  const std::vector<std::string> payloads = sse_payloads(stream);
  ASSERT_EQ(payloads.size(), 2u);
  const json e = json::parse(payloads[0]);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("device lost"), std::string::npos);
  EXPECT_EQ(payloads[1], "[DONE]");

  ResponseBuilder whole(options(Endpoint::chat, false), token_bytes, {{1}});
  add(whole, 0, std::move(d));
  ASSERT_TRUE(whole.error().has_value());
  EXPECT_EQ(whole.error()->http_status, 500);
}

TEST(ResponseBuilder, ChatReturnTokenIds) {
  ResponseOptions o = options(Endpoint::chat, false);
  o.return_token_ids = true;
  ResponseBuilder b(o, token_bytes, {{4, 5}});
  add(b, 0, finish(delta({9}, "<9>", 1), FinishReason::stop));
  const json r = b.response();
  EXPECT_EQ(r["prompt_token_ids"], json({4, 5}));
  EXPECT_EQ(r["choices"][0]["token_ids"], json({9}));
}

TEST(ResponseBuilder, ContinuousUsageOnEveryChunkPerChoice) {
  ResponseOptions o = options(Endpoint::completions, true);
  o.n = 2;
  o.include_usage = true;
  o.continuous_usage = true;
  ResponseBuilder b(o, token_bytes, {{1, 2, 3}});
  std::string stream;
  stream += add(b, 0, delta({5}, "a", 1));
  stream += add(b, 1, delta({6}, "b", 1));
  stream += add(b, 0, delta({7}, "c", 2));
  stream += add(b, 0, finish(delta({}, "", 2), FinishReason::length));
  stream += add(b, 1, finish(delta({8}, "d", 2), FinishReason::length));
  stream += b.stream_tail();
  const std::vector<std::string> payloads = sse_payloads(stream);
  // 3 content chunks, 0's final, 1's content + final, the usage chunk, [DONE].
  ASSERT_EQ(payloads.size(), 8u);
  const auto usage = [](int completion) {
    return json({{"prompt_tokens", 3},
                 {"completion_tokens", completion},
                 {"total_tokens", 3 + completion}});
  };
  const int expected_completion[] = {1, 1, 2, 2, 2, 2};
  for (int i = 0; i < 6; ++i) {
    const json chunk = json::parse(payloads[i]);
    ASSERT_EQ(chunk["choices"].size(), 1u) << chunk;
    EXPECT_EQ(chunk["usage"], usage(expected_completion[i])) << chunk;
  }
  const json total = json::parse(payloads[6]);
  EXPECT_EQ(total["choices"], json::array());
  EXPECT_EQ(total["usage"], json({{"prompt_tokens", 3},
                                  {"completion_tokens", 4},
                                  {"total_tokens", 7},
                                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_EQ(payloads[7], "[DONE]");
}

TEST(ModelsResponse, ListsEveryServedName) {
  ModelCard card;
  card.id = "tiny";
  card.aliases = {"tiny-b"};
  const json r = models_response(card);
  ASSERT_EQ(r["data"].size(), 2u);
  EXPECT_EQ(r["data"][0]["id"], "tiny");
  EXPECT_EQ(r["data"][1]["id"], "tiny-b");
}

TEST(ModelsResponse, Shape) {
  ModelCard card;
  card.id = "tiny";
  card.root = "/models/tiny";
  card.created = 1700000000;
  card.max_model_len = 2048;
  card.vocab_size = 1000;
  const json r = models_response(card);
  EXPECT_EQ(r["object"], "list");
  const json& m = r["data"][0];
  EXPECT_EQ(m["id"], "tiny");
  EXPECT_EQ(m["object"], "model");
  EXPECT_EQ(m["created"], 1700000000);
  EXPECT_EQ(m["owned_by"], "vpod");
  EXPECT_EQ(m["root"], "/models/tiny");
  EXPECT_EQ(m["max_model_len"], 2048);
}

TEST(ErrorBody, Shape) {
  const json e = json::parse(error_body(bad_request("bad \xff value", "max_tokens")));
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "max_tokens");
  EXPECT_TRUE(e["error"]["code"].is_null());
  EXPECT_EQ(e["error"]["message"], "bad \xef\xbf\xbd value");
  EXPECT_EQ(unauthorized().http_status, 401);
  EXPECT_EQ(model_not_found("x").http_status, 404);
  EXPECT_EQ(payload_too_large(10).http_status, 413);
  EXPECT_EQ(service_unavailable("draining").http_status, 503);
  EXPECT_EQ(from_status(invalid_argument("x")).http_status, 400);
  EXPECT_EQ(from_status(unavailable("x")).http_status, 503);
  EXPECT_EQ(from_status(vpod::internal_error("x")).http_status, 500);
  EXPECT_EQ(server_error("x").http_status, 500);
}

TEST(ResponseBuilder, StopReasonNamesStopTokensButNotEos) {
  ResponseOptions o = options(Endpoint::completions, false);
  o.n = 2;
  o.stop_token_ids = {42};
  ResponseBuilder b(o, token_bytes, {{1}});
  engine::RequestOutput by_stop_id = finish(delta({42}, "", 1), FinishReason::stop);
  by_stop_id.stop_token = 42;
  engine::RequestOutput by_eos = finish(delta({2}, "", 1), FinishReason::stop);
  by_eos.stop_token = 2;
  add(b, 0, by_stop_id);
  add(b, 1, by_eos);
  const json r = b.response();
  EXPECT_EQ(r["choices"][0]["stop_reason"], 42);
  EXPECT_TRUE(r["choices"][1]["stop_reason"].is_null());
}

// Parses Prometheus text: every sample line is `name{labels} value` or `name value`.
std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

TEST(Metrics, EngineAndHttpMetricsInOnePage) {
  engine::EngineMetrics engine_metrics;
  engine_metrics.num_requests_running = 3;
  engine_metrics.kv_cache_usage_ratio = 0.25;
  engine_metrics.time_to_first_token_s.observe(0.003);
  ServerMetrics server;
  server.count_http_response(200);
  server.count_http_response(400);
  server.count_http_response(400);
  const std::string text = render_metrics(engine_metrics.snapshot(), "org/model", {}, server);
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds",
        "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
        "vpod_http_responses_total", "vpod_num_http_requests_in_flight"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
  const auto s = parse_prometheus(text);
  const std::string labels = "{model_name=\"org/model\",engine=\"0\"}";
  EXPECT_EQ(s.at("vllm:num_requests_running" + labels), 3);
  EXPECT_EQ(s.at("vllm:kv_cache_usage_perc" + labels), 0.25);
  // Cumulative buckets: 0.003 s counts from le="0.005" on, `le` printed as
  // vLLM (Prometheus's Python client) prints it.
  int buckets = 0;
  const std::string bucket =
      "vllm:time_to_first_token_seconds_bucket{model_name=\"org/model\",engine=\"0\",le=\"";
  for (const auto& [key, value] : s) {
    if (key.rfind(bucket, 0) != 0) continue;
    ++buckets;
    const std::string le = key.substr(bucket.size(), key.size() - bucket.size() - 2);
    EXPECT_EQ(value, le == "+Inf" || std::stod(le) >= 0.005 ? 1 : 0) << key;
  }
  EXPECT_EQ(buckets, 23);
  EXPECT_EQ(s.at(bucket + "0.005\"}"), 1);
  EXPECT_EQ(s.at(bucket + "0.001\"}"), 0);
  EXPECT_EQ(s.at(bucket + "1.0\"}"), 1);
  EXPECT_EQ(text.find("vllm:cache_config_info"), std::string::npos);  // none given
  EXPECT_EQ(s.at("vpod_http_responses_total{status=\"400\"}"), 2);
  EXPECT_EQ(s.at("vpod_num_http_requests_in_flight"), 0);
}

// Every sample vLLM's Grafana dashboard queries: its 12 panels and its
// model_name variable (label_values({__name__=~"vllm:.*"}, model_name)), from
// examples/online_serving/prometheus_grafana/grafana.json in vLLM. Each
// query selects {model_name="$model_name"}; the heatmaps and quantiles group
// _bucket by le, the finish-reason panel groups by finished_reason.
TEST(Metrics, EverySeriesOfVllmsGrafanaDashboardIsThere) {
  const char* const dashboard[] = {"vllm:e2e_request_latency_seconds_bucket",
                                   "vllm:e2e_request_latency_seconds_sum",
                                   "vllm:e2e_request_latency_seconds_count",
                                   "vllm:prompt_tokens_total",
                                   "vllm:generation_tokens_total",
                                   "vllm:time_per_output_token_seconds_bucket",
                                   "vllm:time_per_output_token_seconds_sum",
                                   "vllm:time_per_output_token_seconds_count",
                                   "vllm:num_requests_running",
                                   "vllm:num_requests_waiting",
                                   "vllm:time_to_first_token_seconds_bucket",
                                   "vllm:time_to_first_token_seconds_sum",
                                   "vllm:time_to_first_token_seconds_count",
                                   "vllm:gpu_cache_usage_perc",
                                   "vllm:request_prompt_tokens_bucket",
                                   "vllm:request_generation_tokens_bucket",
                                   "vllm:request_success_total",
                                   "vllm:request_queue_time_seconds_sum",
                                   "vllm:request_prefill_time_seconds_sum",
                                   "vllm:request_decode_time_seconds_sum",
                                   "vllm:request_max_num_generation_tokens_sum"};
  const std::string text = render_metrics(
      engine::EngineMetrics(2048).snapshot(), "my-model",
      {{"enable_prefix_caching", "True"}, {"gpu_memory_utilization", "0.9"}}, ServerMetrics());
  const auto samples = parse_prometheus(text);
  for (const std::string name : dashboard) {
    const std::string selector = name + "{model_name=\"my-model\",engine=\"0\"";
    bool found = false;
    for (const auto& [key, value] : samples) {
      if (!key.starts_with(selector)) continue;
      const std::string rest = key.substr(selector.size());
      if (name.ends_with("_bucket")) {
        found = found || rest.starts_with(",le=\"");
      } else if (name == "vllm:request_success_total") {
        found = found || rest.starts_with(",finished_reason=\"");
      } else {
        found = found || rest == "}";
      }
    }
    EXPECT_TRUE(found) << name << " with model_name=\"my-model\" is not in\n" << text;
  }
  // vLLM's info gauge: the settings as labels (and engine), value 1.
  EXPECT_EQ(samples.at("vllm:cache_config_info{enable_prefix_caching=\"True\","
                       "gpu_memory_utilization=\"0.9\",engine=\"0\"}"),
            1.0);
  EXPECT_NE(text.find("# TYPE vllm:cache_config_info gauge\n"), std::string::npos);
}

}  // namespace
}  // namespace vpod::server
