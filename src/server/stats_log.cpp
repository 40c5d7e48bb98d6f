// The periodic stats line (stats_log.h): throughput over the interval and the
// engine's load, formatted as vLLM logs it.
#include "server/stats_log.h"

#include <fmt/format.h>

namespace vpod::server {

std::optional<std::string> stats_line(const engine::MetricsSnapshot& before,
                                      const engine::MetricsSnapshot& now, double seconds) {
  const std::uint64_t prompt = now.prompt_tokens - before.prompt_tokens;
  const std::uint64_t generated = now.generation_tokens - before.generation_tokens;
  const bool busy = now.num_requests_running > 0 || now.num_requests_waiting > 0 ||
                    before.num_requests_running > 0 || before.num_requests_waiting > 0;
  if (!busy && prompt == 0 && generated == 0) return std::nullopt;
  const double s = seconds > 0 ? seconds : 1.0;
  return fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, "
      "Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%",
      static_cast<double>(prompt) / s, static_cast<double>(generated) / s, now.num_requests_running,
      now.num_requests_waiting, 100.0 * now.kv_cache_usage_ratio);
}

}  // namespace vpod::server
