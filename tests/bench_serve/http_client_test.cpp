// The client's measurement of a stream (StreamMeter) with exact receipt
// times, and the client against a real HTTP server in this process
// (cpp-httplib) that streams with known delays: what it measures must reflect
// them. Over HTTP only bounds that hold on a loaded machine are checked (a
// delay can only make a time longer; a late first chunk can make the next gap
// shorter), the exact times with the meter.
#include "bench/serve/http_client.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace vpod::bench::serve {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr auto kFirstTokenDelay = 150ms;
constexpr auto kTokenGap = 40ms;
constexpr int kTokens = 5;

using Clock = StreamMeter::Clock;

std::string content_event(int i) {
  return fmt::format(R"(data: {{"choices":[{{"index":0,"text":"t{}"}}]}})", i) + "\n\n";
}

TEST(StreamMeter, MeasuresTtftItlAndLatencyFromReceiptTimes) {
  const Clock::time_point start = Clock::now();
  StreamMeter meter(Endpoint::completions, start);
  // Receipt times: first content at 150 ms, then 40, 60, 40, 200 ms apart.
  const std::vector<int> at_ms = {150, 190, 250, 290, 490};
  for (std::size_t i = 0; i < at_ms.size(); ++i) {
    const std::string event = content_event(static_cast<int>(i));
    // Split over two reads, as TCP may deliver them: the event completes at the second.
    ASSERT_TRUE(meter.feed(std::string_view(event).substr(0, 7),
                           start + std::chrono::milliseconds(at_ms[i] - 5)));
    ASSERT_TRUE(
        meter.feed(std::string_view(event).substr(7), start + std::chrono::milliseconds(at_ms[i])));
  }
  ASSERT_TRUE(meter.feed(R"(data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}})"
                         "\n\ndata: [DONE]\n\n",
                         start + std::chrono::milliseconds(600)));
  RequestResult r;
  r.prompt_len = 9;
  meter.finish(r);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.150);
  ASSERT_EQ(r.itl_s.size(), 4u);
  EXPECT_NEAR(r.itl_s[0], 0.040, 1e-12);
  EXPECT_NEAR(r.itl_s[1], 0.060, 1e-12);
  EXPECT_NEAR(r.itl_s[2], 0.040, 1e-12);
  EXPECT_NEAR(r.itl_s[3], 0.200, 1e-12);
  EXPECT_DOUBLE_EQ(r.latency_s, 0.490);  // to the last chunk with choices, not the usage one
  EXPECT_EQ(r.output_tokens, 5);
  EXPECT_TRUE(r.output_tokens_from_usage);
  EXPECT_EQ(r.prompt_len, 3);
  EXPECT_EQ(r.generated_text, "t0t1t2t3t4");  // the reply a next turn resends
  EXPECT_FALSE(r.cached_tokens.has_value());  // usage had no prompt_tokens_details
}

TEST(StreamMeter, ReportsCachedTokensFromTheUsageChunk) {
  const Clock::time_point start = Clock::now();
  StreamMeter meter(Endpoint::completions, start);
  ASSERT_TRUE(meter.feed(content_event(0) + R"(data: {"choices":[],"usage":{"prompt_tokens":40,)"
                                            R"("completion_tokens":1,"prompt_tokens_details":)"
                                            R"({"cached_tokens":32}}})"
                                            "\n\ndata: [DONE]\n\n",
                         start));
  RequestResult r;
  meter.finish(r);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_EQ(r.cached_tokens, 32);
  EXPECT_EQ(r.prompt_len, 40);
  EXPECT_EQ(r.generated_text, "t0");
}

TEST(StreamMeter, CountsContentChunksWithoutUsageAndReportsBrokenStreams) {
  const Clock::time_point start = Clock::now();
  StreamMeter counted(Endpoint::completions, start);
  ASSERT_TRUE(counted.feed(content_event(0) + content_event(1), start));
  RequestResult r;
  counted.finish(r);
  ASSERT_TRUE(r.success);
  EXPECT_EQ(r.output_tokens, 2);
  EXPECT_FALSE(r.output_tokens_from_usage);

  StreamMeter failed(Endpoint::completions, start);
  EXPECT_FALSE(failed.feed("data: {\"error\": {\"message\": \"boom\"}}\n\n", start));
  RequestResult f;
  failed.finish(f);
  EXPECT_FALSE(f.success);
  EXPECT_NE(f.error.find("boom"), std::string::npos) << f.error;

  StreamMeter empty(Endpoint::completions, start);
  ASSERT_TRUE(empty.feed("data: [DONE]\n\n", start));
  RequestResult e;
  empty.finish(e);
  EXPECT_FALSE(e.success);
  EXPECT_EQ(e.error, "the stream carried no chunk with choices (no first token)");
}

class StreamingServer : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"tiny","object":"model"}]})",
                      "application/json");
    });
    server_.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("vpod_time_to_first_token_seconds_sum 1.5\n", "text/plain; version=0.0.4");
    });
    server_.Post("/tokenize", [](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      EXPECT_EQ(body["add_special_tokens"], false);
      res.set_content(R"({"tokens":[3,1,4,1,5],"count":5,"max_model_len":128})",
                      "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      last_body_ = json::parse(req.body);
      if (last_body_["max_tokens"] == 999) {
        res.status = 400;
        res.set_content(R"({"error":{"message":"max_tokens is too large","type":"x"}})",
                        "application/json");
        return;
      }
      res.set_chunked_content_provider(
          "text/event-stream", [](std::size_t, httplib::DataSink& sink) {
            std::this_thread::sleep_for(kFirstTokenDelay);
            for (int i = 0; i < kTokens; ++i) {
              if (i > 0) std::this_thread::sleep_for(kTokenGap);
              // Events split over two writes, as TCP may deliver them.
              const std::string event =
                  fmt::format(R"(data: {{"choices":[{{"index":0,"text":"t{}"}}]}})", i) + "\n\n";
              sink.write(event.data(), 7);
              sink.write(event.data() + 7, event.size() - 7);
            }
            const std::string usage =
                R"(data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}})"
                "\n\ndata: [DONE]\n\n";
            sink.write(usage.data(), usage.size());
            sink.done();
            return true;
          });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  void TearDown() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  OpenAiClient client() const {
    auto address = parse_base_url(fmt::format("http://127.0.0.1:{}", port_));
    EXPECT_TRUE(address.ok());
    return OpenAiClient(*address, "", 30.0);
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
  json last_body_;
};

TEST_F(StreamingServer, MeasuresTtftItlAndLatencyOfTheStream) {
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  StreamRequest request;
  request.model = "tiny";
  request.prompt_ids = prompt;
  request.max_tokens = kTokens;
  const RequestResult r = client().stream(request);
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_EQ(last_body_["prompt"], json({1, 2, 3}));
  EXPECT_EQ(last_body_["stream_options"]["include_usage"], true);
  EXPECT_EQ(r.output_tokens, kTokens);
  EXPECT_TRUE(r.output_tokens_from_usage);
  EXPECT_EQ(r.prompt_len, 3);
  // The server sleeps before it sends: a measured time is never shorter.
  const double first = std::chrono::duration<double>(kFirstTokenDelay).count();
  const double gap = std::chrono::duration<double>(kTokenGap).count();
  EXPECT_GE(r.ttft_s, first);
  ASSERT_EQ(r.itl_s.size(), static_cast<std::size_t>(kTokens - 1));
  for (double itl : r.itl_s) EXPECT_GE(itl, 0.0);
  EXPECT_GE(r.latency_s, first + (kTokens - 1) * gap);
  double sum = r.ttft_s;
  for (double itl : r.itl_s) sum += itl;
  EXPECT_NEAR(sum, r.latency_s, 1e-9);  // latency = TTFT + the gaps, by definition
}

TEST_F(StreamingServer, ReportsHttpErrorsWithTheServersMessage) {
  const std::vector<std::int32_t> prompt = {1};
  StreamRequest request;
  request.model = "tiny";
  request.prompt_ids = prompt;
  request.max_tokens = 999;
  const RequestResult r = client().stream(request);
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "HTTP 400: max_tokens is too large");
}

TEST_F(StreamingServer, ListsModelsAndTokenizes) {
  const auto model = client().first_model_id();
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(*model, "tiny");
  const auto ids = client().tokenize("tiny", "pi");
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<std::int32_t>{3, 1, 4, 1, 5}));
  const auto metrics = client().metrics_text();
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(*metrics, "vpod_time_to_first_token_seconds_sum 1.5\n");
  // No /detokenize route: a clear error, not a crash.
  const std::vector<std::int32_t> one = {1};
  EXPECT_FALSE(client().detokenize("tiny", one).ok());
}

TEST(StreamingClient, ConnectionRefusedIsAFailedRequest) {
  // A port that was free a moment ago and has no listener.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  auto address = parse_base_url(fmt::format("http://127.0.0.1:{}", port));
  ASSERT_TRUE(address.ok());
  const std::vector<std::int32_t> prompt = {1};
  StreamRequest request;
  request.prompt_ids = prompt;
  const RequestResult r = OpenAiClient(*address, "", 5.0).stream(request);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("transport"), std::string::npos) << r.error;
}

TEST(ParseBaseUrl, SplitsOriginAndPrefix) {
  auto a = parse_base_url("http://127.0.0.1:8000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->origin, "http://127.0.0.1:8000");
  EXPECT_EQ(a->path_prefix, "");
  auto b = parse_base_url("https://host/api/v1/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->origin, "https://host");
  EXPECT_EQ(b->path_prefix, "/api");
  EXPECT_FALSE(parse_base_url("127.0.0.1:8000").ok());
  EXPECT_FALSE(parse_base_url("ftp://x").ok());
  EXPECT_FALSE(parse_base_url("http://").ok());
}

}  // namespace
}  // namespace vpod::bench::serve
