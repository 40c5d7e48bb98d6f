// A blocking client for an OpenAI-compatible server (vpod's or vLLM's), over
// cpp-httplib. Each call opens its own connection, so calls from several
// threads never share state.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/serve/metrics.h"
#include "bench/serve/openai_stream.h"
#include "bench/serve/sse.h"
#include "common/status.h"

namespace vpod::bench::serve {

struct ServerAddress {
  std::string origin;       // scheme://host:port
  std::string path_prefix;  // "" or e.g. "/proxy" (no trailing '/')
};

// "http://127.0.0.1:8000" or "http://host:8000/prefix"; a trailing "/v1" is
// dropped, since the routes are appended with it.
Result<ServerAddress> parse_base_url(std::string_view url);

// What the client measures of one streamed completion, from the body's bytes
// and the times they arrived: TTFT (the first chunk with choices), the gaps
// between such chunks (ITL), latency (to the last one), the usage counts
// (cached prompt tokens included) and the generated text.
// The caller passes the receipt times, so the measurement is tested with
// exact times and no server.
class StreamMeter {
 public:
  using Clock = std::chrono::steady_clock;
  StreamMeter(Endpoint endpoint, Clock::time_point start) : endpoint_(endpoint), start_(start) {}
  // Body bytes received at `now`. False once the stream is broken (malformed
  // or an error event): stop reading.
  bool feed(std::string_view data, Clock::time_point now);
  // The measurement, or why there is none (broken stream, no chunk with
  // choices). prompt_len is replaced by usage.prompt_tokens when reported.
  void finish(RequestResult& result) const;
  const std::string& stream_error() const { return stream_error_; }

 private:
  Endpoint endpoint_;
  Clock::time_point start_;
  SseParser parser_;
  bool first_chunk_ = false;
  double ttft_s_ = 0.0;
  std::vector<double> itl_s_;
  Clock::time_point last_chunk_;
  int num_content_chunks_ = 0;
  std::optional<int> usage_prompt_, usage_completion_, usage_cached_;
  std::string text_;
  std::string stream_error_;
};

class OpenAiClient {
 public:
  OpenAiClient(ServerAddress address, std::string api_key, double timeout_s);

  // The id of the first model listed by GET /v1/models.
  Result<std::string> first_model_id() const;
  // POST /tokenize (vLLM's, and vpod's) without special tokens.
  Result<std::vector<std::int32_t>> tokenize(const std::string& model,
                                             const std::string& text) const;
  // POST /detokenize.
  Result<std::string> detokenize(const std::string& model, std::span<const std::int32_t> ids) const;

  // GET /metrics: the Prometheus text.
  Result<std::string> metrics_text() const;

  // Streams one completion and measures it (times relative to the send).
  // prompt_len in the result is the prompt's token count as sent, replaced
  // by usage.prompt_tokens when the server reports it.
  RequestResult stream(const StreamRequest& request) const;

 private:
  ServerAddress address_;
  std::string api_key_;
  double timeout_s_;
};

}  // namespace vpod::bench::serve
