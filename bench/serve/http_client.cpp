// The benchmark's OpenAI client (http_client.h): one connection per call,
// streamed responses timed token by token.
#include "bench/serve/http_client.h"

#include <httplib.h>

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace vpod::bench::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxErrorBody = 2000;  // bytes of an error body kept for the report

std::unique_ptr<httplib::Client> make_client(const ServerAddress& address, double timeout_s) {
  auto client = std::make_unique<httplib::Client>(address.origin);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(timeout_s));
  client->set_connection_timeout(timeout);
  client->set_read_timeout(timeout);
  client->set_write_timeout(timeout);
  return client;
}

httplib::Headers make_headers(const std::string& api_key) {
  // identity: a compressed event stream would arrive in bursts, skewing timings.
  httplib::Headers headers = {{"Accept-Encoding", "identity"}};
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  return headers;
}

std::string describe_http_error(int status, std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return fmt::format("HTTP {}: {}", status, e["message"].get<std::string>());
    }
  }
  return fmt::format("HTTP {}: {}", status, body.substr(0, kMaxErrorBody));
}

// POST/GET a JSON request and parse a JSON response.
Result<json> call_json(const ServerAddress& address, const std::string& api_key, double timeout_s,
                       const std::string& method, const std::string& route,
                       const json* body = nullptr) {
  auto client = make_client(address, timeout_s);
  const std::string path = address.path_prefix + route;
  httplib::Result res =
      method == "GET" ? client->Get(path, make_headers(api_key))
                      : client->Post(path, make_headers(api_key), body->dump(), "application/json");
  if (!res) {
    return unavailable(
        fmt::format("{} {}{}: {}", method, address.origin, path, httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return unavailable(fmt::format("{} {}{}: {}", method, address.origin, path,
                                   describe_http_error(res->status, res->body)));
  }
  json j = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return data_loss(fmt::format("{} {}{}: response is not JSON", method, address.origin, path));
  }
  return j;
}

}  // namespace

Result<ServerAddress> parse_base_url(std::string_view url) {
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return invalid_argument(fmt::format("base URL '{}' lacks a scheme (http://)", url));
  }
  const std::string_view scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return invalid_argument(fmt::format("base URL '{}': scheme must be http or https", url));
  }
  const std::size_t host_start = scheme_end + 3;
  const std::size_t path_start = url.find('/', host_start);
  ServerAddress address;
  address.origin = std::string(url.substr(0, path_start));
  if (address.origin.size() == host_start) {
    return invalid_argument(fmt::format("base URL '{}' has no host", url));
  }
  std::string_view path =
      path_start == std::string_view::npos ? std::string_view() : url.substr(path_start);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.ends_with("/v1")) path.remove_suffix(3);
  address.path_prefix = std::string(path);
  return address;
}

OpenAiClient::OpenAiClient(ServerAddress address, std::string api_key, double timeout_s)
    : address_(std::move(address)), api_key_(std::move(api_key)), timeout_s_(timeout_s) {}

Result<std::string> OpenAiClient::first_model_id() const {
  VPOD_ASSIGN_OR_RETURN(const json models,
                        call_json(address_, api_key_, timeout_s_, "GET", "/v1/models"));
  if (!models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
      !models["data"][0].contains("id") || !models["data"][0]["id"].is_string()) {
    return data_loss("GET /v1/models: no model listed");
  }
  return models["data"][0]["id"].get<std::string>();
}

Result<std::vector<std::int32_t>> OpenAiClient::tokenize(const std::string& model,
                                                         const std::string& text) const {
  const json body = {{"model", model}, {"prompt", text}, {"add_special_tokens", false}};
  VPOD_ASSIGN_OR_RETURN(const json out,
                        call_json(address_, api_key_, timeout_s_, "POST", "/tokenize", &body));
  if (!out.contains("tokens") || !out["tokens"].is_array()) {
    return data_loss("POST /tokenize: no 'tokens' array in the response");
  }
  std::vector<std::int32_t> ids;
  for (const json& t : out["tokens"]) {
    if (!t.is_number_integer()) return data_loss("POST /tokenize: a token id is not an integer");
    ids.push_back(t.get<std::int32_t>());
  }
  return ids;
}

Result<std::string> OpenAiClient::detokenize(const std::string& model,
                                             std::span<const std::int32_t> ids) const {
  const json body = {{"model", model}, {"tokens", ids}};
  VPOD_ASSIGN_OR_RETURN(const json out,
                        call_json(address_, api_key_, timeout_s_, "POST", "/detokenize", &body));
  if (!out.contains("prompt") || !out["prompt"].is_string()) {
    return data_loss("POST /detokenize: no 'prompt' string in the response");
  }
  return out["prompt"].get<std::string>();
}

Result<std::string> OpenAiClient::metrics_text() const {
  auto client = make_client(address_, timeout_s_);
  const std::string path = address_.path_prefix + "/metrics";
  httplib::Result res = client->Get(path, make_headers(api_key_));
  if (!res) {
    return unavailable(
        fmt::format("GET {}{}: {}", address_.origin, path, httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return unavailable(fmt::format("GET {}{}: {}", address_.origin, path,
                                   describe_http_error(res->status, res->body)));
  }
  return res->body;
}

bool StreamMeter::feed(std::string_view data, Clock::time_point now) {
  parser_.feed(data, [&](std::string_view event) {
    if (!stream_error_.empty()) return;
    Result<StreamChunk> chunk = parse_stream_chunk(event, endpoint_);
    if (!chunk.ok()) {
      stream_error_ = chunk.status().message();
      return;
    }
    if (chunk->error) {
      stream_error_ = "server error in stream: " + *chunk->error;
      return;
    }
    if (chunk->has_choices) {
      if (!first_chunk_) {
        first_chunk_ = true;
        ttft_s_ = std::chrono::duration<double>(now - start_).count();
      } else {
        itl_s_.push_back(std::chrono::duration<double>(now - last_chunk_).count());
      }
      last_chunk_ = now;
      ++num_content_chunks_;
      text_ += chunk->text;
    }
    if (chunk->prompt_tokens) usage_prompt_ = chunk->prompt_tokens;
    if (chunk->completion_tokens) usage_completion_ = chunk->completion_tokens;
    if (chunk->cached_tokens) usage_cached_ = chunk->cached_tokens;
  });
  return stream_error_.empty();
}

void StreamMeter::finish(RequestResult& result) const {
  if (!stream_error_.empty()) {
    result.error = stream_error_;
    return;
  }
  if (!first_chunk_) {
    result.error = "the stream carried no chunk with choices (no first token)";
    return;
  }
  result.success = true;
  result.ttft_s = ttft_s_;
  result.itl_s = itl_s_;
  result.latency_s = std::chrono::duration<double>(last_chunk_ - start_).count();
  if (usage_completion_) {
    result.output_tokens = *usage_completion_;
    result.output_tokens_from_usage = true;
  } else {
    result.output_tokens = num_content_chunks_;
  }
  if (usage_prompt_) result.prompt_len = *usage_prompt_;
  result.cached_tokens = usage_cached_;
  result.generated_text = text_;
}

RequestResult OpenAiClient::stream(const StreamRequest& request) const {
  RequestResult result;
  result.prompt_len = static_cast<int>(request.prompt_ids.size());
  auto client = make_client(address_, timeout_s_);

  httplib::Request http;
  http.method = "POST";
  http.path =
      address_.path_prefix +
      (request.endpoint == Endpoint::completions ? "/v1/completions" : "/v1/chat/completions");
  http.headers = make_headers(api_key_);
  http.headers.emplace("Content-Type", "application/json");
  http.headers.emplace("Accept", "text/event-stream");
  http.body = stream_request_body(request);

  int status = 0;
  std::string error_body;
  http.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  StreamMeter meter(request.endpoint, Clock::now());
  http.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    const Clock::time_point now = Clock::now();
    if (status != 200) {
      error_body.append(data,
                        std::min(size, kMaxErrorBody - std::min(kMaxErrorBody, error_body.size())));
      return true;
    }
    return meter.feed(std::string_view(data, size), now);  // stop reading a broken stream
  };

  const httplib::Result res = client->send(http);
  if (!meter.stream_error().empty()) {
    result.error = meter.stream_error();
    return result;
  }
  if (!res) {
    result.error = "transport: " + httplib::to_string(res.error());
    return result;
  }
  if (status != 200) {
    result.error = describe_http_error(status, error_body);
    return result;
  }
  meter.finish(result);
  return result;
}

}  // namespace vpod::bench::serve
