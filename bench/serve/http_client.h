// A blocking client for an OpenAI-compatible server (vpod's or vLLM's), over
// cpp-httplib. Each call opens its own connection, so calls from several
// threads never share state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/serve/metrics.h"
#include "bench/serve/openai_stream.h"
#include "common/status.h"

namespace vpod::bench::serve {

struct ServerAddress {
  std::string origin;       // scheme://host:port
  std::string path_prefix;  // "" or e.g. "/proxy" (no trailing '/')
};

// "http://127.0.0.1:8000" or "http://host:8000/prefix"; a trailing "/v1" is
// dropped, since the routes are appended with it.
Result<ServerAddress> parse_base_url(std::string_view url);

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
