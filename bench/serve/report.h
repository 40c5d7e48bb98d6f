// The end-of-run report: vLLM's result table on stdout, and a JSON document
// with the same keys as `vllm bench serve --save-result` (plus ours).
#pragma once

#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/serve/metrics.h"
#include "bench/serve/prometheus.h"

namespace vpod::bench::serve {

std::string format_table(const BenchmarkMetrics& m, int max_concurrency_seen);

// Metrics as flat keys (duration, completed, request_throughput, mean_ttft_ms,
// median_ttft_ms, std_ttft_ms, p99_ttft_ms, ..., mean_cached_tokens) and, per
// request, input_lens, output_lens, ttfts, itls, e2els, cached_tokens (null
// where unreported) and errors (seconds).
nlohmann::json metrics_json(const BenchmarkMetrics& m, std::span<const RequestResult> results);

// The prefix cache over the run: the server's hit rate from its /metrics
// counters (absent: nullopt) and the mean cached_tokens of the responses.
// Empty when there is neither, unless `always` (a prefix-caching dataset,
// where "n/a" is worth saying).
std::string format_prefix_cache(const std::optional<PrefixCacheDelta>& server,
                                const BenchmarkMetrics& m, bool always);
// {"prefix", "queries", "hits", "hit_rate"}, or null without counters.
nlohmann::json prefix_cache_json(const std::optional<PrefixCacheDelta>& server);

// One row per turn of a multi-turn run: requests, mean prompt and cached
// tokens, and TTFT (mean, median, the asked percentiles).
std::string format_turn_table(std::span<const TurnMetrics> turns);
nlohmann::json turn_metrics_json(std::span<const TurnMetrics> turns);

}  // namespace vpod::bench::serve
