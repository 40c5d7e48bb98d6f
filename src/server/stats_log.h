// The periodic stats line `vpod serve` logs while it is busy, as vLLM does:
// prompt and generation throughput over the interval, running and waiting
// requests, KV cache use, and the prefix cache's hit rate.
#pragma once

#include <optional>
#include <string>

#include "engine/metrics.h"

namespace vpod::server {

// The line for the interval from `before` to `now` (`seconds` long), or
// std::nullopt when the server was idle throughout (nothing running or
// waiting at either end, no tokens processed).
std::optional<std::string> stats_line(const engine::MetricsSnapshot& before,
                                      const engine::MetricsSnapshot& now, double seconds);

}  // namespace vpod::server
