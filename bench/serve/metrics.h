// Per-request measurements and the benchmark's metrics, defined exactly as
// `vllm bench serve` defines them (vllm/benchmarks/serve.py, calculate_metrics
// and the streaming request functions):
//
// - TTFT: from sending the request to the first streamed chunk whose
//   `choices` is non-empty (its text may be empty, e.g. a special token).
// - ITL: the gaps between consecutive such chunks (one per chunk, so a chunk
//   carrying several tokens is one gap).
// - E2E latency: from sending to the last such chunk (not to `[DONE]`).
// - TPOT: (latency - TTFT) / (output tokens - 1), over requests with more
//   than one output token; requests with one count as TPOT 0 for goodput.
// - Output tokens: usage.completion_tokens from the stream's final usage
//   chunk (stream_options.include_usage); input tokens: the prompt's length.
// - Throughputs divide totals over successful requests by the benchmark's
//   wall-clock duration (first send to last completion).
// - Goodput: successful requests per second whose every SLO'd metric is
//   <= its SLO (`--slo ttft:MS,tpot:MS,e2el:MS`, any subset).
// - Cached tokens (ours, for prefix caching): the mean of
//   usage.prompt_tokens_details.cached_tokens over the successful requests
//   whose usage reports it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/serve/stats.h"
#include "common/status.h"

namespace vpod::bench::serve {

struct RequestResult {
  bool success = false;
  std::string error;   // why it failed (HTTP status and body, transport error)
  int prompt_len = 0;  // input tokens (the dataset's, or usage.prompt_tokens when reported)
  int output_tokens = 0;
  bool output_tokens_from_usage = false;  // false: counted from content chunks
  std::optional<int> cached_tokens;       // usage.prompt_tokens_details.cached_tokens
  std::string generated_text;             // the streamed text, in order
  double send_time_s = 0.0;               // since the benchmark started
  double ttft_s = 0.0;
  double latency_s = 0.0;
  std::vector<double> itl_s;
};

// Service-level objectives for goodput, in milliseconds.
struct Slo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

// "ttft:200,tpot:50" (also space-separated, as vLLM's --goodput). Keys:
// ttft, tpot, e2el; values are positive milliseconds.
Result<Slo> parse_slo(std::string_view text);

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;
  long long total_input = 0;   // over successful requests
  long long total_output = 0;  // over successful requests
  double duration_s = 0.0;
  double request_throughput = 0.0;        // completed / duration
  std::optional<double> request_goodput;  // only with an SLO
  int good_completed = 0;
  double input_throughput = 0.0;        // total_input / duration
  double output_throughput = 0.0;       // total_output / duration
  double total_token_throughput = 0.0;  // (input + output) / duration
  Summary ttft_ms;
  Summary tpot_ms;
  Summary itl_ms;
  Summary e2el_ms;
  // Over the successful requests that reported cached_tokens (none: unset).
  int num_cached_reported = 0;
  long long total_cached = 0;
  long long total_input_cached_reported = 0;  // their prompt tokens
  std::optional<double> mean_cached_tokens;
};

BenchmarkMetrics compute_metrics(std::span<const RequestResult> results, double duration_s,
                                 const Slo& slo, std::span<const double> percentiles);

// The requests of one turn of a multi-turn run (results laid out conversation
// by conversation, `num_turns` each): how many succeeded, their mean prompt
// and cached tokens, and their TTFT.
struct TurnMetrics {
  int turn = 0;  // 1-based
  int completed = 0;
  int failed = 0;
  double mean_input_tokens = 0.0;
  std::optional<double> mean_cached_tokens;
  Summary ttft_ms;
};

std::vector<TurnMetrics> compute_turn_metrics(std::span<const RequestResult> results, int num_turns,
                                              std::span<const double> percentiles);

}  // namespace vpod::bench::serve
