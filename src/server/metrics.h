// GET /metrics: the engine's metrics (engine::format_prometheus: running and
// waiting requests, KV usage, token and preemption counters, TTFT / TPOT /
// end-to-end histograms, ...) followed by the HTTP layer's own, all in the
// Prometheus text format (0.0.4) with the `vpod_` prefix.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

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

// The whole /metrics page.
std::string render_metrics(const engine::MetricsSnapshot& engine, const ServerMetrics& server);

}  // namespace vpod::server
