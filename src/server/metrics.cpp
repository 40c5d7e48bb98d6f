// GET /metrics (metrics.h): the engine's series followed by the HTTP
// layer's own, in Prometheus text.
#include "server/metrics.h"

#include <fmt/format.h>

#include <iterator>

namespace vpod::server {

void ServerMetrics::count_http_response(int status) {
  std::lock_guard lock(mutex_);
  ++http_responses_[status];
}

std::string ServerMetrics::render() const {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP vpod_num_http_requests_in_flight HTTP requests being served (streams "
                 "included).\n# TYPE vpod_num_http_requests_in_flight gauge\n"
                 "vpod_num_http_requests_in_flight {}\n",
                 num_http_in_flight.load());
  fmt::format_to(it,
                 "# HELP vpod_http_connections Open HTTP connections (those being closed "
                 "included).\n# TYPE vpod_http_connections gauge\nvpod_http_connections {}\n"
                 "# HELP vpod_http_connections_idle Kept-alive HTTP connections waiting for a "
                 "request (closed first for room at --max-connections).\n"
                 "# TYPE vpod_http_connections_idle gauge\nvpod_http_connections_idle {}\n",
                 num_http_connections.load(), num_http_connections_idle.load());
  fmt::format_to(it,
                 "# HELP vpod_http_responses_total HTTP responses by status code.\n"
                 "# TYPE vpod_http_responses_total counter\n");
  std::lock_guard lock(mutex_);
  for (const auto& [status, count] : http_responses_) {
    fmt::format_to(it, "vpod_http_responses_total{{status=\"{}\"}} {}\n", status, count);
  }
  return out;
}

std::string render_metrics(const engine::MetricsSnapshot& engine, std::string_view model_name,
                           const engine::MetricsInfoLabels& cache_config,
                           const ServerMetrics& server) {
  return engine::format_prometheus(engine, model_name, cache_config) + server.render();
}

}  // namespace vpod::server
