// Engine metrics (metrics.h): histogram buckets, snapshots and the
// Prometheus text of the engine's series.
#include "engine/metrics.h"

#include <algorithm>
#include <cstdio>

#include "common/check.h"

namespace vpod::engine {

namespace {

// Bucket bounds in seconds, as vLLM exports them, so dashboards built for
// vLLM read vpod's histograms unchanged.
constexpr double kTtftBuckets[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
constexpr double kTokenLatencyBuckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                           0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                           7.5,  10.0,  20.0, 40.0,  80.0};
constexpr double kRequestLatencyBuckets[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                             5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
constexpr double kStepBuckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                   0.1,    0.2,   0.5,   1.0,   2.0,  5.0};

void add_double(std::atomic<double>& a, double v) { a.fetch_add(v, std::memory_order_relaxed); }

void append_histogram(std::string& out, const std::string& name, std::string_view help,
                      const HistogramData& h) {
  out += "# HELP " + name + " " + std::string(help) + "\n";
  out += "# TYPE " + name + " histogram\n";
  std::uint64_t cumulative = 0;
  char buf[64];
  for (std::size_t i = 0; i < h.upper_bounds.size(); ++i) {
    cumulative += h.bucket_counts[i];
    std::snprintf(buf, sizeof(buf), "%.17g", h.upper_bounds[i]);
    out += name + "_bucket{le=\"" + buf + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += h.bucket_counts.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  std::snprintf(buf, sizeof(buf), "%.17g", h.sum);
  out += name + "_sum " + buf + "\n";
  out += name + "_count " + std::to_string(h.count) + "\n";
}

template <typename T>
void append_scalar(std::string& out, const std::string& name, std::string_view type,
                   std::string_view help, T value) {
  out += "# HELP " + name + " " + std::string(help) + "\n";
  out += "# TYPE " + name + " " + std::string(type) + "\n";
  if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", static_cast<double>(value));
    out += name + " " + buf + "\n";
  } else {
    out += name + " " + std::to_string(value) + "\n";
  }
}

}  // namespace

Histogram::Histogram(std::span<const double> upper_bounds)
    : upper_bounds_(upper_bounds.begin(), upper_bounds.end()),
      counts_(new std::atomic<std::uint64_t>[upper_bounds.size() + 1]) {
  VPOD_CHECK(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()));
  for (std::size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::observe(double value) {
  // Prometheus buckets are inclusive upper bounds: value <= le.
  const auto it = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  counts_[it - upper_bounds_.begin()].fetch_add(1, std::memory_order_relaxed);
  add_double(sum_, value);
}

HistogramData Histogram::snapshot() const {
  HistogramData h;
  h.upper_bounds = upper_bounds_;
  h.bucket_counts.resize(upper_bounds_.size() + 1);
  for (std::size_t i = 0; i < h.bucket_counts.size(); ++i) {
    h.bucket_counts[i] = counts_[i].load(std::memory_order_relaxed);
    h.count += h.bucket_counts[i];
  }
  h.sum = sum_.load(std::memory_order_relaxed);
  return h;
}

EngineMetrics::EngineMetrics()
    : time_to_first_token_s(kTtftBuckets),
      time_per_output_token_s(kTokenLatencyBuckets),
      inter_token_latency_s(kTokenLatencyBuckets),
      e2e_request_latency_s(kRequestLatencyBuckets),
      request_queue_time_s(kRequestLatencyBuckets),
      step_duration_s(kStepBuckets) {}

void EngineMetrics::add_step(const StepTimes& t, bool launched) {
  add_double(schedule_s_, t.schedule_s);
  add_double(prepare_s_, t.prepare_s);
  add_double(forward_s_, t.forward_s);
  add_double(commit_s_, t.commit_s);
  add_double(launch_s_, t.launch_s);
  add_double(wait_s_, t.wait_s);
  add_double(host_hidden_s_, t.host_hidden_s);
  add_double(host_exposed_s_, t.host_exposed_s);
  if (!launched) return;
  step_duration_s.observe(t.schedule_s + t.prepare_s + t.forward_s + t.commit_s);
  num_steps.fetch_add(1, std::memory_order_relaxed);
}

std::string_view step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::prefill: return "prefill";
    case StepKind::decode: return "decode";
    case StepKind::hybrid: return "hybrid";
  }
  return "?";
}

void EngineMetrics::count_step_kind(std::size_t prefills, std::size_t decodes) {
  if (prefills == 0 && decodes == 0) return;
  const StepKind kind = prefills == 0  ? StepKind::decode
                        : decodes == 0 ? StepKind::prefill
                                       : StepKind::hybrid;
  steps_by_kind[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
  if (kind == StepKind::hybrid) hybrid_step_decodes.fetch_add(decodes, std::memory_order_relaxed);
}

void EngineMetrics::count_finished(FinishReason reason) {
  requests_finished[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
}

MetricsSnapshot EngineMetrics::snapshot() const {
  MetricsSnapshot m;
  m.time_to_first_token_s = time_to_first_token_s.snapshot();
  m.time_per_output_token_s = time_per_output_token_s.snapshot();
  m.inter_token_latency_s = inter_token_latency_s.snapshot();
  m.e2e_request_latency_s = e2e_request_latency_s.snapshot();
  m.request_queue_time_s = request_queue_time_s.snapshot();
  m.step_duration_s = step_duration_s.snapshot();
  m.num_requests_running = num_requests_running.load(std::memory_order_relaxed);
  m.num_requests_waiting = num_requests_waiting.load(std::memory_order_relaxed);
  m.kv_cache_usage_ratio = kv_cache_usage_ratio.load(std::memory_order_relaxed);
  m.num_preemptions = num_preemptions.load(std::memory_order_relaxed);
  m.prompt_tokens = prompt_tokens.load(std::memory_order_relaxed);
  m.generation_tokens = generation_tokens.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumFinishReasons; ++i)
    m.requests_finished[i] = requests_finished[i].load(std::memory_order_relaxed);
  m.num_steps = num_steps.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumStepKinds; ++i)
    m.steps_by_kind[i] = steps_by_kind[i].load(std::memory_order_relaxed);
  m.hybrid_step_decodes = hybrid_step_decodes.load(std::memory_order_relaxed);
  m.prefix_cache_queries = prefix_cache_queries.load(std::memory_order_relaxed);
  m.prefix_cache_hits = prefix_cache_hits.load(std::memory_order_relaxed);
  m.step_time_total.schedule_s = schedule_s_.load(std::memory_order_relaxed);
  m.step_time_total.prepare_s = prepare_s_.load(std::memory_order_relaxed);
  m.step_time_total.forward_s = forward_s_.load(std::memory_order_relaxed);
  m.step_time_total.commit_s = commit_s_.load(std::memory_order_relaxed);
  m.step_time_total.launch_s = launch_s_.load(std::memory_order_relaxed);
  m.step_time_total.wait_s = wait_s_.load(std::memory_order_relaxed);
  m.step_time_total.host_hidden_s = host_hidden_s_.load(std::memory_order_relaxed);
  m.step_time_total.host_exposed_s = host_exposed_s_.load(std::memory_order_relaxed);
  return m;
}

std::string format_prometheus(const MetricsSnapshot& m, std::string_view prefix) {
  const std::string p(prefix);
  std::string out;
  out.reserve(16384);
  append_scalar(out, p + "num_requests_running", "gauge", "Requests in the running batch.",
                m.num_requests_running);
  append_scalar(out, p + "num_requests_waiting", "gauge",
                "Requests waiting for admission (including preempted ones).",
                m.num_requests_waiting);
  append_scalar(out, p + "kv_cache_usage_ratio", "gauge",
                "Fraction of the KV cache reserved by requests (0 to 1).", m.kv_cache_usage_ratio);
  append_scalar(out, p + "num_preemptions_total", "counter",
                "Requests preempted (by recomputation) because the KV cache was full.",
                m.num_preemptions);
  append_scalar(out, p + "prompt_tokens_total", "counter",
                "Prompt tokens of requests, counted at their first generated token.",
                m.prompt_tokens);
  append_scalar(out, p + "generation_tokens_total", "counter", "Generated tokens.",
                m.generation_tokens);
  append_scalar(out, p + "prefix_cache_queries_total", "counter",
                "Tokens looked up in the prefix cache at admission.", m.prefix_cache_queries);
  append_scalar(out, p + "prefix_cache_hits_total", "counter",
                "Tokens found in the prefix cache at admission (their prefill is skipped).",
                m.prefix_cache_hits);

  const std::string finished = p + "request_success_total";
  out += "# HELP " + finished + " Finished requests, by finish reason.\n";
  out += "# TYPE " + finished + " counter\n";
  for (int i = 1; i < kNumFinishReasons; ++i) {  // skip FinishReason::none
    out += finished + "{finished_reason=\"" +
           std::string(finish_reason_name(static_cast<FinishReason>(i))) + "\"} " +
           std::to_string(m.requests_finished[i]) + "\n";
  }

  append_histogram(out, p + "time_to_first_token_seconds", "Time to first token.",
                   m.time_to_first_token_s);
  append_histogram(out, p + "time_per_output_token_seconds",
                   "Mean time per output token after the first, per request.",
                   m.time_per_output_token_s);
  append_histogram(out, p + "inter_token_latency_seconds", "Time between consecutive tokens.",
                   m.inter_token_latency_s);
  append_histogram(out, p + "e2e_request_latency_seconds", "Arrival to finish.",
                   m.e2e_request_latency_s);
  append_histogram(out, p + "request_queue_time_seconds", "Arrival to first admission.",
                   m.request_queue_time_s);
  append_histogram(out, p + "step_duration_seconds", "Wall time of one engine step.",
                   m.step_duration_s);

  append_scalar(out, p + "steps_total", "counter", "Engine steps run.", m.num_steps);
  const std::string kinds = p + "steps_by_kind_total";
  out += "# HELP " + kinds +
         " Engine steps by what they computed: prompt chunks only (prefill), decodes only "
         "(decode), or both (hybrid).\n";
  out += "# TYPE " + kinds + " counter\n";
  for (int i = 0; i < kNumStepKinds; ++i) {
    out += kinds + "{kind=\"" + std::string(step_kind_name(static_cast<StepKind>(i))) + "\"} " +
           std::to_string(m.steps_by_kind[i]) + "\n";
  }
  append_scalar(
      out, p + "hybrid_step_decodes_total", "counter",
      "Decodes summed over hybrid steps (divided by the hybrid steps: their mean decodes).",
      m.hybrid_step_decodes);
  const std::string phase = p + "step_phase_seconds_total";
  out += "# HELP " + phase + " Engine step time by phase.\n";
  out += "# TYPE " + phase + " counter\n";
  const std::pair<const char*, double> phases[] = {{"schedule", m.step_time_total.schedule_s},
                                                   {"prepare", m.step_time_total.prepare_s},
                                                   {"forward", m.step_time_total.forward_s},
                                                   {"commit", m.step_time_total.commit_s}};
  for (const auto& [name, seconds] : phases) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", seconds);
    out += phase + "{phase=\"" + name + "\"} " + buf + "\n";
  }
  const std::string host = p + "step_host_seconds_total";
  out += "# HELP " + host +
         " Engine host work (schedule, prepare, commit) done while a launched step ran "
         "(hidden) or while none did (exposed: the device waited).\n";
  out += "# TYPE " + host + " counter\n";
  const std::pair<const char*, double> overlaps[] = {{"hidden", m.step_time_total.host_hidden_s},
                                                     {"exposed", m.step_time_total.host_exposed_s}};
  for (const auto& [name, seconds] : overlaps) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", seconds);
    out += host + "{overlap=\"" + name + "\"} " + buf + "\n";
  }
  return out;
}

}  // namespace vpod::engine
