// The end-of-run report: vLLM's result table on stdout, and a JSON document
// with the same keys as `vllm bench serve --save-result` (plus ours).
#pragma once

#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/serve/metrics.h"

namespace vpod::bench::serve {

std::string format_table(const BenchmarkMetrics& m, int max_concurrency_seen);

// Metrics as flat keys (duration, completed, request_throughput, mean_ttft_ms,
// median_ttft_ms, std_ttft_ms, p99_ttft_ms, ...) and, per request,
// input_lens, output_lens, ttfts, itls, e2els and errors (seconds).
nlohmann::json metrics_json(const BenchmarkMetrics& m, std::span<const RequestResult> results);

}  // namespace vpod::bench::serve
