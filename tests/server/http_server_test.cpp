// The HTTP server end to end over loopback, against the scripted backend:
// routes, OpenAI shapes, streaming, every error status, API keys,
// concurrency, client disconnects and graceful shutdown.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/scripted_backend.h"

namespace vpod::server {
namespace {

using nlohmann::json;
using testing::ScriptedBackend;
using namespace std::chrono_literals;

constexpr std::size_t kBodyLimit = 1 << 20;

// A server on an ephemeral loopback port, serving on its own thread.
class Harness {
 public:
  explicit Harness(ServerConfig config = {}, std::chrono::milliseconds step = 2ms)
      : backend_(step) {
    config.host = "127.0.0.1";
    config.port = 0;
    config.limits.max_body_bytes = kBodyLimit;
    config.http_workers = 4;
    config.log_requests = false;
    server_ = std::make_unique<HttpServer>(config);
    const Status bound = server_->bind();
    EXPECT_TRUE(bound.ok()) << bound.to_string();
    serve_result_ = std::async(std::launch::async, [this] { return server_->serve(); });
  }
  ~Harness() { stop(0ms); }

  void attach() { server_->attach(&backend_); }
  void stop(std::chrono::milliseconds drain) {
    if (stopped_) return;
    stopped_ = true;
    server_->shutdown(drain);
    EXPECT_EQ(serve_result_.wait_for(10s), std::future_status::ready) << "serve() did not return";
    if (serve_result_.valid()) {
      EXPECT_TRUE(serve_result_.get().ok());
    }
  }

  int port() const { return server_->port(); }
  HttpServer& server() { return *server_; }
  ScriptedBackend& backend() { return backend_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port());
    c.set_read_timeout(30, 0);
    c.set_tcp_nodelay(true);  // the request head and body are separate writes
    return c;
  }

 private:
  ScriptedBackend backend_;
  std::unique_ptr<HttpServer> server_;
  std::future<Status> serve_result_;
  bool stopped_ = false;
};

httplib::Result post(httplib::Client& c, const std::string& path, const json& body,
                     const httplib::Headers& headers = {}) {
  return c.Post(path.c_str(), headers, body.dump(), "application/json");
}

// The data payloads of an SSE body.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

// What the scripted backend generates for a text prompt (no stop rules).
std::string expected_text(const std::string& prompt, std::uint64_t seed, int n, bool bos = true) {
  std::vector<std::int32_t> ids;
  if (bos) ids.push_back(ScriptedBackend::kBos);
  for (char c : prompt) ids.push_back(ScriptedBackend::kByteBase + static_cast<unsigned char>(c));
  std::string text;
  for (int i = 0; i < n; ++i) text += ScriptedBackend::output_byte(ids, seed, i);
  return text;
}

void expect_error(const httplib::Result& r, int status, const std::string& param = "") {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  const json body = json::parse(r->body);
  ASSERT_TRUE(body.contains("error")) << r->body;
  const json& e = body["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_FALSE(e["message"].get<std::string>().empty());
  EXPECT_TRUE(e["type"].is_string());
  EXPECT_TRUE(e.contains("param"));
  EXPECT_TRUE(e.contains("code"));
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << r->body;
  }
}

// A raw client socket, to stop reading or disconnect mid-response.
class RawClient {
 public:
  explicit RawClient(int port, int receive_buffer = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0) {  // before connect: it sets the window the server may fill
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawClient() { close(); }
  void send_request(const std::string& path, const std::string& body) {
    const std::string request = "POST " + path +
                                " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                "Content-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd_, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  }
  // Reads until `needle` shows up or the timeout passes.
  std::string read_until(const std::string& needle, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (received_.find(needle) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      received_.append(buf, static_cast<std::size_t>(n));
    }
    return received_;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string received_;
};

// Polls until `condition` holds, up to `timeout`.
template <typename F>
bool eventually(F condition, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

double metric(httplib::Client& c, const std::string& sample) {
  auto r = c.Get("/metrics");
  if (!r || r->status != 200) return -1;
  const std::size_t at = r->body.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(r->body.substr(at + sample.size() + 2));
}

TEST(HttpServer, HealthAndLoading) {
  Harness h;
  auto c = h.client();
  expect_error(c.Get("/health"), 503);  // no backend yet
  expect_error(post(c, "/v1/completions", {{"prompt", "x"}}), 503);
  h.backend().set_ready(false);
  h.attach();
  expect_error(c.Get("/health"), 503);  // still loading
  h.backend().set_ready(true);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto version = c.Get("/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(json::parse(version->body)["version"], "0.1.0");
}

TEST(HttpServer, ModelsList) {
  Harness h;
  h.attach();
  auto c = h.client();
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json m = json::parse(r->body)["data"][0];
  EXPECT_EQ(m["id"], "scripted");
  EXPECT_EQ(m["object"], "model");
  EXPECT_EQ(m["owned_by"], "vpod");
  EXPECT_EQ(m["root"], "/models/scripted");
  EXPECT_EQ(m["max_model_len"], 512);
  EXPECT_TRUE(m["created"].is_number_integer());
}

TEST(HttpServer, EveryServedNameIsAcceptedAndTheFirstReported) {
  Harness h;
  h.backend().card().aliases = {"alias-b", "alias-c"};
  h.attach();
  auto c = h.client();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json data = json::parse(models->body)["data"];
  ASSERT_EQ(data.size(), 3u);
  EXPECT_EQ(data[0]["id"], "scripted");
  EXPECT_EQ(data[1]["id"], "alias-b");
  EXPECT_EQ(data[2]["id"], "alias-c");
  for (const char* name : {"scripted", "alias-b", "alias-c"}) {
    auto r = post(c, "/v1/completions", {{"model", name}, {"prompt", "hi"}, {"max_tokens", 2}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << name << ": " << r->body;
    EXPECT_EQ(json::parse(r->body)["model"], "scripted");
    r = post(c, "/v1/chat/completions",
             {{"model", name},
              {"messages", {{{"role", "user"}, {"content", "hi"}}}},
              {"max_tokens", 2}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << name << ": " << r->body;
  }
  auto r = post(c, "/v1/completions", {{"model", "alias-d"}, {"prompt", "hi"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST(HttpServer, SamplingDefaultsApplyUnlessTheRequestSetsThem) {
  Harness h;
  h.backend().card().sampling_defaults.temperature = 0.0f;  // greedy by default
  h.attach();
  auto c = h.client();
  // The scripted engine's greedy output ignores the seed (it is seed 0's).
  auto r = post(c, "/v1/completions", {{"prompt", "hello"}, {"max_tokens", 7}, {"seed", 42}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], expected_text("hello", 0, 7));
  r = post(c, "/v1/completions",
           {{"prompt", "hello"}, {"max_tokens", 7}, {"seed", 42}, {"temperature", 1.0}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], expected_text("hello", 42, 7));
}

TEST(HttpServer, LogprobsAboveMaxLogprobsAre400NamingTheLimit) {
  Harness h;
  h.backend().card().max_logprobs = 3;
  h.attach();
  auto c = h.client();
  auto r = post(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"logprobs", 4}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  json error = json::parse(r->body)["error"];
  EXPECT_EQ(error["param"], "logprobs");
  EXPECT_NE(error["message"].get<std::string>().find("between 0 and 3"), std::string::npos)
      << error;
  r = post(c, "/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"max_tokens", 2},
            {"logprobs", true},
            {"top_logprobs", 4}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  error = json::parse(r->body)["error"];
  EXPECT_EQ(error["param"], "top_logprobs");
  EXPECT_NE(error["message"].get<std::string>().find("between 0 and 3"), std::string::npos)
      << error;
  r = post(c, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"logprobs", 3}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST(HttpServer, CompletionNonStreamed) {
  Harness h;
  h.attach();
  auto c = h.client();
  auto r = post(c, "/v1/completions",
                {{"model", "scripted"}, {"prompt", "hello"}, {"max_tokens", 7}, {"seed", 42}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const json body = json::parse(r->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(body["model"], "scripted");
  EXPECT_EQ(body["choices"][0]["text"], expected_text("hello", 42, 7));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 6},
                                 {"completion_tokens", 7},
                                 {"total_tokens", 13},
                                 {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

// cache_salt reaches the engine and the engine's cached-token count reaches
// usage (the scripted backend "caches" whole 4-token blocks of earlier
// prompts under the same salt), in completions and chat, streamed or not.
TEST(HttpServer, CacheSaltAndCachedTokensInUsage) {
  Harness h;
  h.attach();
  auto c = h.client();
  const std::string prompt = "a long shared prompt";  // BOS + 20 bytes = 21 tokens
  const auto cached = [&](json body) {
    auto r = post(c, "/v1/completions", body);
    EXPECT_TRUE(r);
    if (!r) return -1;
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  const json base = {{"prompt", prompt}, {"max_tokens", 3}};
  EXPECT_EQ(cached(base), 0);
  EXPECT_EQ(cached(base), 20);  // all but the last token, in whole blocks
  json salted = base;
  salted["cache_salt"] = "tenant-1";
  EXPECT_EQ(cached(salted), 0);  // another tenant's cache
  EXPECT_EQ(cached(salted), 20);
  json other = base;
  other["prompt"] = "a long other prompt";
  EXPECT_EQ(cached(other), 8);  // "<s>a long " shares 8 tokens (two blocks)

  // Streamed: the usage chunk carries it.
  json streamed = base;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  auto s = post(c, "/v1/completions", streamed);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  const std::vector<std::string> payloads = sse_payloads(s->body);
  ASSERT_GE(payloads.size(), 2u);
  const json usage = json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 20);

  // Chat, with its salt.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hello there"}}}},
                     {"max_tokens", 2},
                     {"cache_salt", "tenant-2"}};
  auto first = post(c, "/v1/chat/completions", chat);
  auto second = post(c, "/v1/chat/completions", chat);
  ASSERT_TRUE(first && second);
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(json::parse(first->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_GT(json::parse(second->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // A bad salt is a 400 naming the field, on both endpoints.
  for (const json& bad : {json(""), json(3), json::array()}) {
    json b1 = base;
    b1["cache_salt"] = bad;
    auto r1 = post(c, "/v1/completions", b1);
    json b2 = chat;
    b2["cache_salt"] = bad;
    auto r2 = post(c, "/v1/chat/completions", b2);
    ASSERT_TRUE(r1 && r2);
    for (const auto* r : {&r1, &r2}) {
      EXPECT_EQ((*r)->status, 400) << (*r)->body;
      EXPECT_EQ(json::parse((*r)->body)["error"]["param"], "cache_salt") << (*r)->body;
    }
  }
}

TEST(HttpServer, CompletionSeedsAndNChoices) {
  Harness h;
  h.attach();
  auto c = h.client();
  auto one = post(c, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 12}, {"seed", 7}});
  auto two =
      post(c, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 12}, {"seed", 7}, {"n", 2}});
  ASSERT_TRUE(one && two);
  ASSERT_EQ(two->status, 200) << two->body;
  const json a = json::parse(one->body), b = json::parse(two->body);
  ASSERT_EQ(b["choices"].size(), 2u);
  EXPECT_EQ(b["choices"][0]["index"], 0);
  EXPECT_EQ(b["choices"][1]["index"], 1);
  // Choice 0 of n=2 keeps the seed; choice 1 gets another one.
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_NE(b["choices"][0]["text"], b["choices"][1]["text"]);
  EXPECT_EQ(b["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(b["usage"]["completion_tokens"], 24);
  // Batched prompts: choices in prompt order.
  auto batch = post(c, "/v1/completions",
                    {{"prompt", {"p1", "p2"}}, {"max_tokens", 3}, {"seed", 1}, {"n", 2}});
  ASSERT_TRUE(batch);
  const json bb = json::parse(batch->body);
  ASSERT_EQ(bb["choices"].size(), 4u);
  EXPECT_EQ(bb["choices"][0]["text"], expected_text("p1", 1, 3));
  EXPECT_EQ(bb["choices"][2]["text"], expected_text("p2", 1, 3));
  EXPECT_EQ(bb["usage"]["prompt_tokens"], 6);
}

TEST(HttpServer, CompletionTokenIdsEchoStopAndLogprobs) {
  Harness h;
  h.attach();
  auto c = h.client();
  const std::string full = expected_text("hello", 3, 20);
  const std::string stop = full.substr(5, 2);
  auto r = post(c, "/v1/completions",
                {{"prompt", "hello"},
                 {"max_tokens", 20},
                 {"seed", 3},
                 {"stop", stop},
                 {"echo", true},
                 {"return_token_ids", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  const std::string expected = full.substr(0, full.find(stop));
  EXPECT_EQ(choice["text"], "hello" + expected);
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["stop_reason"], stop);
  EXPECT_EQ(choice["prompt_token_ids"].size(), 6u);
  EXPECT_EQ(choice["prompt_token_ids"][0], ScriptedBackend::kBos);

  auto ids = post(c, "/v1/completions",
                  {{"prompt", {5, 6, 7}}, {"max_tokens", 2}, {"logprobs", 2}, {"temperature", 0}});
  ASSERT_TRUE(ids);
  ASSERT_EQ(ids->status, 200) << ids->body;
  const json lp = json::parse(ids->body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 2u);
  EXPECT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 3u);  // top 2 plus the sampled token
  EXPECT_EQ(lp["text_offset"], json({0, 1}));
}

TEST(HttpServer, ChatStreamedMatchesNonStreamed) {
  Harness h;
  h.attach();
  auto c = h.client();
  const json messages = {{{"role", "system"}, {"content", "sys"}},
                         {{"role", "user"}, {"content", "hi"}}};
  auto whole =
      post(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 9}, {"seed", 5}});
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json w = json::parse(whole->body);
  EXPECT_EQ(w["object"], "chat.completion");
  EXPECT_EQ(w["choices"][0]["message"]["role"], "assistant");
  const std::string content = w["choices"][0]["message"]["content"];
  EXPECT_EQ(content.size(), 9u);

  auto streamed = post(c, "/v1/chat/completions",
                       {{"messages", messages},
                        {"max_tokens", 9},
                        {"seed", 5},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  const auto payloads = sse_payloads(streamed->body);
  ASSERT_GE(payloads.size(), 4u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  std::string joined;
  for (std::size_t i = 0; i + 3 < payloads.size(); ++i) {
    const json chunk = json::parse(payloads[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    const json& delta = chunk["choices"][0]["delta"];
    EXPECT_EQ(delta.contains("role"), i == 0) << payloads[i];
    EXPECT_FALSE(delta["content"].get<std::string>().empty());
    joined += delta["content"].get<std::string>();
  }
  EXPECT_EQ(joined, content);
  const json final_chunk = json::parse(payloads[payloads.size() - 3]);
  EXPECT_EQ(final_chunk["choices"][0]["finish_reason"], "length");
  const json usage = json::parse(payloads[payloads.size() - 2]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 9);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], w["usage"]["prompt_tokens"]);
}

TEST(HttpServer, ChatDefaultMaxTokensFillsTheContext) {
  Harness h;
  h.attach();
  auto c = h.client();
  // "<|user|>x\n<|assistant|>" is 23 tokens; 512 - 23 are left.
  auto r = post(c, "/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"temperature", 0}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json body = json::parse(r->body);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 23);
  EXPECT_EQ(body["usage"]["completion_tokens"], 512 - 23);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
}

TEST(HttpServer, TokenizeAndDetokenize) {
  Harness h;
  h.attach();
  auto c = h.client();
  auto t = post(c, "/tokenize", {{"prompt", "ab"}, {"return_token_strs", true}});
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  const json tj = json::parse(t->body);
  EXPECT_EQ(tj["tokens"], json({1, 3 + 'a', 3 + 'b'}));
  EXPECT_EQ(tj["count"], 3);
  EXPECT_EQ(tj["max_model_len"], 512);
  EXPECT_EQ(tj["token_strs"], json({"<s>", "a", "b"}));
  auto m = post(
      c, "/tokenize",
      {{"messages", {{{"role", "user"}, {"content", "q"}}}}, {"add_generation_prompt", false}});
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  EXPECT_EQ(json::parse(m->body)["count"], std::string("<|user|>q\n").size());
  auto d = post(c, "/detokenize", {{"tokens", {3 + 'h', 3 + 'i'}}});
  ASSERT_TRUE(d);
  EXPECT_EQ(json::parse(d->body)["prompt"], "hi");
}

TEST(HttpServer, ErrorStatuses) {
  Harness h;
  h.attach();
  auto c = h.client();
  // 400: malformed JSON, wrong types, out of range, empty inputs, invalid UTF-8.
  expect_error(c.Post("/v1/completions", "{\"prompt\": ", "application/json"), 400);
  expect_error(post(c, "/v1/completions", {{"prompt", "x"}, {"max_tokens", "5"}}), 400,
               "max_tokens");
  expect_error(post(c, "/v1/completions", {{"prompt", "x"}, {"temperature", 9}}), 400,
               "temperature");
  expect_error(post(c, "/v1/completions", {{"prompt", ""}}), 400, "prompt");
  expect_error(post(c, "/v1/chat/completions", {{"messages", json::array()}}), 400, "messages");
  expect_error(c.Post("/v1/completions", "{\"prompt\": \"\xff\xfe\"}", "application/json"), 400);
  expect_error(post(c, "/v1/chat/completions",
                    {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"tools", {{{"type", "function"}}}}}),
               400, "tools[0].function");
  // Tools imply tool_choice "auto", which needs --enable-auto-tool-choice.
  expect_error(post(c, "/v1/chat/completions",
                    {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}}),
               400, "tools");
  expect_error(post(c, "/v1/chat/completions",
                    {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"response_format", {{"type", "yaml"}}}}),
               400, "response_format.type");
  // 400: prompt + max_tokens beyond --max-model-len (512).
  expect_error(post(c, "/v1/completions", {{"prompt", std::string(500, 'a')}, {"max_tokens", 20}}),
               400, "max_tokens");
  expect_error(post(c, "/v1/chat/completions",
                    {{"messages", {{{"role", "user"}, {"content", std::string(600, 'a')}}}}}),
               400, "max_tokens");
  // 400: the chat template refuses the conversation.
  expect_error(
      post(c, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "REJECT"}}}}}),
      400, "messages");
  // 404: unknown model or route.
  expect_error(post(c, "/v1/completions", {{"model", "gpt-9"}, {"prompt", "x"}}), 404, "model");
  expect_error(c.Get("/v1/nothing"), 404);
  expect_error(c.Get("/v1/completions"), 404);
  // 413: a body over the limit, then the server still answers.
  expect_error(c.Post("/v1/completions", std::string(kBodyLimit + 1, ' '), "application/json"),
               413);
  auto fine = post(c, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}});
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200);
  // 500: the engine failed the sequence.
  expect_error(post(c, "/v1/completions", {{"prompt", "FAIL"}}), 500);
  auto failed_stream = post(c, "/v1/completions", {{"prompt", "FAIL"}, {"stream", true}});
  ASSERT_TRUE(failed_stream);
  const auto payloads = sse_payloads(failed_stream->body);
  ASSERT_EQ(payloads.size(), 2u);
  EXPECT_TRUE(json::parse(payloads[0]).contains("error"));
  EXPECT_EQ(payloads[1], "[DONE]");
  // Errors are counted by status.
  EXPECT_GE(metric(c, "vpod_http_responses_total{status=\"400\"}"), 10);
}

TEST(HttpServer, ApiKey) {
  ServerConfig config;
  config.api_key = "sekrit";
  Harness h(config);
  h.attach();
  auto c = h.client();
  const json body = {{"prompt", "x"}, {"max_tokens", 2}};
  expect_error(post(c, "/v1/completions", body), 401);
  expect_error(post(c, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401);
  expect_error(post(c, "/v1/completions", body, {{"Authorization", "sekrit"}}), 401);
  expect_error(post(c, "/v1/completions", body, {{"Authorization", "Bearer sekri"}}), 401);
  expect_error(c.Get("/v1/models"), 401);
  expect_error(post(c, "/tokenize", {{"prompt", "x"}}), 401);
  auto ok = post(c, "/v1/completions", body, {{"Authorization", "Bearer sekrit"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  // Health, metrics and version stay open for probes.
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/metrics")->status, 200);
}

TEST(HttpServer, ConcurrentStreams) {
  Harness h;
  h.attach();
  constexpr int kStreams = 32;
  std::vector<std::future<std::string>> results;
  for (int i = 0; i < kStreams; ++i) {
    results.push_back(std::async(std::launch::async, [&h, i] {
      auto c = h.client();
      auto r = post(c, "/v1/completions",
                    {{"prompt", "stream " + std::to_string(i)},
                     {"max_tokens", 40},
                     {"seed", i},
                     {"stream", true}});
      if (!r || r->status != 200) return std::string("request failed");
      std::string text;
      for (const std::string& p : sse_payloads(r->body)) {
        if (p == "[DONE]") continue;
        text += json::parse(p)["choices"][0]["text"].get<std::string>();
      }
      return text;
    }));
  }
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(results[i].get(), expected_text("stream " + std::to_string(i), i, 40)) << i;
  }
  auto c = h.client();
  EXPECT_TRUE(eventually([&] { return h.backend().num_running() == 0; }));
}

TEST(HttpServer, DisconnectAbortsStream) {
  Harness h;
  h.attach();
  auto c = h.client();
  RawClient raw(h.port());
  raw.send_request("/v1/completions",
                   json({{"prompt", "long"}, {"max_tokens", 400}, {"stream", true}}).dump());
  const std::string got = raw.read_until("data: ", 5s);
  ASSERT_NE(got.find("200 OK"), std::string::npos) << got;
  EXPECT_EQ(h.backend().num_running(), 1);
  raw.close();
  // 400 tokens take 0.8 s; the abort lands within a few steps.
  EXPECT_TRUE(eventually([&] { return h.backend().num_running() == 0; }, 300ms));
  EXPECT_TRUE(eventually([&] {
    return metric(c,
                  "vllm:request_success_total{model_name=\"scripted\",engine=\"0\","
                  "finished_reason=\"abort\"}") == 1;
  }));
  EXPECT_TRUE(eventually([&] { return h.server().num_active_generations() == 0; }));
  EXPECT_EQ(metric(c, "vllm:kv_cache_usage_perc{model_name=\"scripted\",engine=\"0\"}"), 0);
}

TEST(HttpServer, DisconnectAbortsNonStreamedRequest) {
  Harness h;
  h.attach();
  RawClient raw(h.port());
  raw.send_request("/v1/completions", json({{"prompt", "long"}, {"max_tokens", 400}}).dump());
  ASSERT_TRUE(eventually([&] { return h.backend().num_running() == 1; }));
  raw.close();
  EXPECT_TRUE(eventually([&] { return h.backend().num_running() == 0; }, 300ms));
}

TEST(HttpServer, AStreamNobodyReadsIsAbortedAtItsBufferCap) {
  ServerConfig config;
  config.limits.max_stream_buffer_bytes = 64 << 10;
  Harness h(config, 5ms);
  h.attach();
  auto c = h.client();
  // 128 choices x 500 tokens of SSE (about 10 MB) to a client that reads
  // nothing: more than the kernel's socket buffers hold, so the server's own
  // buffer reaches its cap long before the 2.5 s the tokens take.
  RawClient raw(h.port(), /*receive_buffer=*/4096);
  raw.send_request(
      "/v1/completions",
      json({{"prompt", "long"}, {"max_tokens", 500}, {"n", 128}, {"stream", true}, {"logprobs", 2}})
          .dump());
  const std::string abort_metric =
      "vllm:request_success_total{model_name=\"scripted\",engine=\"0\",finished_reason=\"abort\"}";
  EXPECT_TRUE(eventually([&] { return metric(c, abort_metric) >= 1; }, 10s));
  EXPECT_TRUE(eventually([&] { return h.backend().num_running() == 0; }, 10s));
  EXPECT_TRUE(eventually([&] { return h.server().num_active_generations() == 0; }, 10s));
}

TEST(HttpServer, KeepAliveServesManyRequestsOnOneConnection) {
  Harness h;
  h.attach();
  auto c = h.client();
  c.set_keep_alive(true);
  for (int i = 0; i < 50; ++i) {
    auto r = post(c, "/v1/completions", {{"prompt", "k"}, {"max_tokens", 1}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }
}

TEST(HttpServer, ShutdownClosesIdleKeepAliveConnections) {
  // A keep-alive timeout far beyond the bound below: shutdown must close the
  // idle connection itself, and no load makes a 60 s stall out of it.
  ServerConfig config;
  config.limits.keep_alive_timeout = std::chrono::minutes(10);
  Harness h(config);
  h.attach();
  auto c = h.client();
  c.set_keep_alive(true);
  auto r = post(c, "/v1/completions", {{"prompt", "k"}, {"max_tokens", 1}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  // The connection stays open and idle; shutdown does not wait for its timeout.
  const auto start = std::chrono::steady_clock::now();
  h.stop(0ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(HttpServer, ShutdownDrainsThenAborts) {
  Harness h({}, 5ms);
  h.attach();
  // A short request finishes within the drain deadline; a long one is aborted.
  auto short_request = std::async(std::launch::async, [&h] {
    auto c = h.client();
    return post(c, "/v1/completions", {{"prompt", "short"}, {"max_tokens", 20}});
  });
  auto long_stream = std::async(std::launch::async, [&h] {
    auto c = h.client();
    return post(c, "/v1/completions", {{"prompt", "long"}, {"max_tokens", 500}, {"stream", true}});
  });
  ASSERT_TRUE(eventually([&] { return h.server().num_active_generations() == 2; }));
  auto stopper = std::async(std::launch::async, [&h] { h.stop(300ms); });
  ASSERT_TRUE(eventually([&] { return h.server().draining(); }));
  {
    auto c = h.client();
    expect_error(post(c, "/v1/completions", {{"prompt", "late"}}), 503);
    expect_error(c.Get("/health"), 503);
  }
  auto s = short_request.get();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 200);
  EXPECT_EQ(json::parse(s->body)["choices"][0]["finish_reason"], "length");
  auto l = long_stream.get();
  ASSERT_TRUE(l);
  const auto payloads = sse_payloads(l->body);
  ASSERT_GE(payloads.size(), 2u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_EQ(json::parse(payloads[payloads.size() - 2])["choices"][0]["finish_reason"], "abort");
  stopper.get();
}

}  // namespace
}  // namespace vpod::server
