// GET /metrics: the engine's metrics under vLLM's names
// (engine::format_prometheus: vllm:num_requests_running, TTFT / ITL /
// end-to-end histograms, ..., labelled with the served model name) followed
// by the HTTP layer's own (vpod_http_...), in the Prometheus text format 0.0.4.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "engine/metrics.h"

namespace vpod::server {

class ServerMetrics {
 public:
  // HTTP requests being served right now (streams included).
  std::atomic<int> num_http_in_flight{0};
  // Open connections (those being closed included) and, of them, the
  // kept-alive ones waiting for their next request; kept by the
  // ConnectionRegistry.
  std::atomic<int> num_http_connections{0};
  std::atomic<int> num_http_connections_idle{0};

  void count_http_response(int status);
  // The HTTP layer's metrics alone.
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<int, std::uint64_t> http_responses_;  // by status code
};

// The whole /metrics page; `model_name` is the served model name (the first
// --served-model-name), the model_name label of the engine's series.
// `cache_config`: vllm:cache_config_info's labels (ModelCard::cache_config).
std::string render_metrics(const engine::MetricsSnapshot& engine, std::string_view model_name,
                           const engine::MetricsInfoLabels& cache_config,
                           const ServerMetrics& server);

}  // namespace vpod::server
