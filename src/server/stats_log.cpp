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
  std::string line = fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, "
      "Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%",
      static_cast<double>(prompt) / s, static_cast<double>(generated) / s, now.num_requests_running,
      now.num_requests_waiting, 100.0 * now.kv_cache_usage_ratio);
  // The hit rate of the interval's admissions (of the whole run when the
  // interval admitted nothing); absent while nothing was ever looked up
  // (prefix caching off).
  if (now.prefix_cache_queries > 0) {
    std::int64_t queries = now.prefix_cache_queries - before.prefix_cache_queries;
    std::int64_t hits = now.prefix_cache_hits - before.prefix_cache_hits;
    if (queries <= 0) {
      queries = now.prefix_cache_queries;
      hits = now.prefix_cache_hits;
    }
    line += fmt::format(", Prefix cache hit rate: {:.1f}%",
                        100.0 * static_cast<double>(hits) / static_cast<double>(queries));
  }
  return line;
}

}  // namespace vpod::server
