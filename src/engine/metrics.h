// Engine metrics: request latency and size histograms, load gauges, token and
// preemption counters, and where step time goes. The engine thread records
// into EngineMetrics with relaxed atomics (no locks, no allocation); any
// thread takes a MetricsSnapshot, a plain struct, and the server renders it
// with format_prometheus under vLLM's names (vllm:..., model_name label).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace vpod::engine {

struct HistogramData {
  std::vector<double> upper_bounds;          // ascending; +Inf is implicit
  std::vector<std::uint64_t> bucket_counts;  // per bucket, not cumulative; size bounds + 1
  double sum = 0.0;
  std::uint64_t count = 0;  // == sum of bucket_counts
};

class Histogram {
 public:
  explicit Histogram(std::span<const double> upper_bounds);
  explicit Histogram(const std::vector<double>& upper_bounds)
      : Histogram(std::span<const double>(upper_bounds)) {}
  void observe(double value);
  HistogramData snapshot() const;

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // upper_bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

// vLLM's bucket bounds for token counts (build_1_2_5_buckets): 1, 2, 5, 10,
// 20, 50, ... up to and including max_value.
std::vector<double> buckets_1_2_5(int max_value);

// A sample or `le` value as Prometheus's Python client (which vLLM uses)
// prints it: the shortest decimal that reads back to the same double, in
// Python's repr form ("0.1", "2.5", "1.0", "1e-05"), integers of more than
// six digits as Go prints them ("1e+06"), and "+Inf", "-Inf", "NaN".
// PromQL matches `le` as a string, so {le="0.1"} must find 0.1's bucket.
std::string prometheus_float(double value);

// Number of FinishReason values, for per-reason counters.
inline constexpr int kNumFinishReasons = 5;

// What a launched step computed: prompt chunks only, decodes only, or both
// (a hybrid batch: the steps POD-Attention fuses).
enum class StepKind : std::uint8_t { prefill, decode, hybrid };
inline constexpr int kNumStepKinds = 3;
std::string_view step_kind_name(StepKind kind);  // "prefill" | "decode" | "hybrid"

struct StepTimes {
  double schedule_s = 0.0;  // scheduler.schedule (policy + batch layout), inbox, releases
  double prepare_s = 0.0;   // kv.prepare (critical-path part of KV growth)
  double forward_s = 0.0;   // executor launch + wait (model + sampling) = launch_s + wait_s
  double commit_s = 0.0;    // commit, stop rules, detokenization, streaming
  // Parts of forward_s: the executor's launch() call (on CUDA the host's
  // issuing of the step; a synchronous executor computes the whole step in
  // it) and the time the engine thread blocked in wait().
  double launch_s = 0.0;
  double wait_s = 0.0;
  // The engine's own host work (schedule + prepare + commit) split by
  // whether a launched step was running meanwhile: hidden behind the device,
  // or exposed (nothing in flight, so the device waits for the host).
  double host_hidden_s = 0.0;
  double host_exposed_s = 0.0;
};

// Per request, as vLLM defines them: queue = arrival to first scheduled;
// prefill = first scheduled to first token; decode = first to last token;
// inference = first scheduled to last token; time_per_output_token = the
// request's decode time over its tokens after the first; the token counts
// and max_tokens at its end. inter_token_latency: every gap between two
// tokens of a request.
struct MetricsSnapshot {
  HistogramData time_to_first_token_s;
  HistogramData time_per_output_token_s;  // per request (vLLM's request_time_per_output_token)
  HistogramData inter_token_latency_s;
  HistogramData e2e_request_latency_s;
  HistogramData request_queue_time_s;
  HistogramData request_prefill_time_s;
  HistogramData request_decode_time_s;
  HistogramData request_inference_time_s;
  HistogramData request_prompt_tokens;
  HistogramData request_generation_tokens;
  HistogramData request_max_tokens;  // the request's max_tokens (capped by the context)
  HistogramData iteration_tokens;    // tokens computed by a launched step
  HistogramData step_duration_s;

  std::int64_t num_requests_running = 0;
  std::int64_t num_requests_waiting = 0;
  double kv_cache_usage_ratio = 0.0;

  std::uint64_t num_preemptions = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generation_tokens = 0;
  std::array<std::uint64_t, kNumFinishReasons> requests_finished{};  // by FinishReason
  std::uint64_t num_steps = 0;
  std::array<std::uint64_t, kNumStepKinds> steps_by_kind{};  // by StepKind
  std::uint64_t hybrid_step_decodes = 0;                     // decodes summed over hybrid steps
  // Structured output: decode rows that sat a step out, their mask late.
  std::uint64_t grammar_deferred_samples = 0;
  StepTimes step_time_total;  // summed over all steps
  // Prefix cache, in tokens, as vLLM counts them: looked up at admissions
  // (readmissions after preemption included) and found cached there.
  std::int64_t prefix_cache_queries = 0;
  std::int64_t prefix_cache_hits = 0;
};

class EngineMetrics {
 public:
  // Token-count histograms get vLLM's 1-2-5 buckets up to max_model_len.
  static constexpr int kDefaultMaxModelLen = 8192;
  explicit EngineMetrics(int max_model_len = kDefaultMaxModelLen);

  Histogram time_to_first_token_s;
  Histogram time_per_output_token_s;
  Histogram inter_token_latency_s;
  Histogram e2e_request_latency_s;
  Histogram request_queue_time_s;
  Histogram request_prefill_time_s;
  Histogram request_decode_time_s;
  Histogram request_inference_time_s;
  Histogram request_prompt_tokens;
  Histogram request_generation_tokens;
  Histogram request_max_tokens;
  Histogram iteration_tokens;
  Histogram step_duration_s;

  std::atomic<std::int64_t> num_requests_running{0};
  std::atomic<std::int64_t> num_requests_waiting{0};
  std::atomic<double> kv_cache_usage_ratio{0.0};

  std::atomic<std::uint64_t> num_preemptions{0};
  std::atomic<std::uint64_t> prompt_tokens{0};
  std::atomic<std::uint64_t> generation_tokens{0};
  std::array<std::atomic<std::uint64_t>, kNumFinishReasons> requests_finished{};
  std::atomic<std::uint64_t> num_steps{0};
  std::array<std::atomic<std::uint64_t>, kNumStepKinds> steps_by_kind{};
  std::atomic<std::uint64_t> hybrid_step_decodes{0};
  std::atomic<std::uint64_t> grammar_deferred_samples{0};
  std::atomic<std::int64_t> prefix_cache_queries{0};
  std::atomic<std::int64_t> prefix_cache_hits{0};

  // `launched`: the step ran a forward (counted in num_steps and the step
  // duration histogram); a pipelined loop's last call only collects.
  void add_step(const StepTimes& t, bool launched = true);
  void count_finished(FinishReason reason);
  // A launched step of `prefills` prompt chunks and `decodes` decodes.
  void count_step_kind(std::size_t prefills, std::size_t decodes);
  MetricsSnapshot snapshot() const;

 private:
  std::atomic<double> schedule_s_{0.0};
  std::atomic<double> prepare_s_{0.0};
  std::atomic<double> forward_s_{0.0};
  std::atomic<double> commit_s_{0.0};
  std::atomic<double> launch_s_{0.0};
  std::atomic<double> wait_s_{0.0};
  std::atomic<double> host_hidden_s_{0.0};
  std::atomic<double> host_exposed_s_{0.0};
};

// Prometheus text exposition format (version 0.0.4) under vLLM's v1 names
// (vllm:time_to_first_token_seconds, ...; docs/server.md lists them), and
// vpod's own step series (vpod_step_...). Every series carries vLLM's labels
// model_name="<model_name>" and engine="0". `cache_config`, when given, is
// rendered as vLLM's info gauge vllm:cache_config_info{<name>="<value>",...,
// engine="0"} 1 (vLLM writes Python's str() of each setting: "True", "0.9").
using MetricsInfoLabels = std::vector<std::pair<std::string, std::string>>;
std::string format_prometheus(const MetricsSnapshot& m, std::string_view model_name,
                              const MetricsInfoLabels& cache_config = {});

}  // namespace vpod::engine
