// Engine metrics (metrics.h): histogram buckets, snapshots and the
// Prometheus text of the engine's series.
#include "engine/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/check.h"

namespace vpod::engine {

namespace {

// Bucket bounds as vLLM's PrometheusStatLogger defines them
// (vllm/v1/metrics/loggers.py), so dashboards and alerts built for vLLM read
// vpod's histograms unchanged.
constexpr double kTtftBuckets[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
constexpr double kTokenLatencyBuckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                           0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                           7.5,  10.0,  20.0, 40.0,  80.0};
constexpr double kRequestLatencyBuckets[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                             5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
constexpr double kIterationTokenBuckets[] = {1,   8,    16,   32,   64,   128,  256,
                                             512, 1024, 2048, 4096, 8192, 16384};
// vpod's own (no vLLM counterpart): one engine step's wall time.
constexpr double kStepBuckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                   0.1,    0.2,   0.5,   1.0,   2.0,  5.0};

void add_double(std::atomic<double>& a, double v) { a.fetch_add(v, std::memory_order_relaxed); }

// A label value escaped as the text format requires (backslash, quote, newline).
std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Renders series under one label set: `labels` is `model_name="...",engine="0"`.
class Exposition {
 public:
  Exposition(std::string& out, std::string labels) : out_(out), labels_(std::move(labels)) {}

  void header(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  // One sample; `extra` is more labels (`kind="decode"`) or empty.
  void sample(std::string_view name, std::string_view extra, std::string_view value) {
    out_ += name;
    out_ += '{';
    out_ += labels_;
    if (!extra.empty()) {
      out_ += ',';
      out_ += extra;
    }
    out_ += "} ";
    out_ += value;
    out_ += '\n';
  }
  void gauge(std::string_view name, std::string_view help, double value) {
    header(name, "gauge", help);
    sample(name, "", prometheus_float(value));
  }
  void counter(std::string_view name, std::string_view help, std::uint64_t value) {
    header(name, "counter", help);
    sample(name, "", std::to_string(value));
  }
  void histogram(std::string_view name, std::string_view help, const HistogramData& h) {
    header(name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    // Cumulative counts; a default HistogramData (no buckets counted) reads as zeros.
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < h.upper_bounds.size(); ++i) {
      if (i < h.bucket_counts.size()) cumulative += h.bucket_counts[i];
      sample(bucket, "le=\"" + prometheus_float(h.upper_bounds[i]) + "\"",
             std::to_string(cumulative));
    }
    sample(bucket, "le=\"+Inf\"", std::to_string(h.count));
    sample(std::string(name) + "_sum", "", prometheus_float(h.sum));
    sample(std::string(name) + "_count", "", std::to_string(h.count));
  }

 private:
  std::string& out_;
  std::string labels_;
};

}  // namespace

std::vector<double> buckets_1_2_5(int max_value) {
  std::vector<double> bounds;
  for (double scale = 1.0;; scale *= 10.0) {
    for (const double mantissa : {1.0, 2.0, 5.0}) {
      if (mantissa * scale > max_value) return bounds;
      bounds.push_back(mantissa * scale);
    }
  }
}

std::string prometheus_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // The shortest round-trip digits, from "d.ddde+XX".
  char buf[64];
  const auto [end, ec] =
      std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  VPOD_CHECK(ec == std::errc());
  const std::string_view sci(buf, end - buf);
  const std::size_t e = sci.find('e');
  std::string_view mantissa = sci.substr(0, e);
  const int exponent = std::atoi(std::string(sci.substr(e + 1)).c_str());
  std::string sign;
  if (mantissa.front() == '-') {
    sign = "-";
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (const char c : mantissa)
    if (c != '.') digits += c;
  const int num_digits = static_cast<int>(digits.size());
  // value = 0.<digits> * 10^point. Python's repr is positional for
  // -4 < point <= 16 and scientific otherwise.
  const int point = exponent + 1;
  if (point <= -4 || point > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (num_digits > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (point > 6 && sign.empty()) {
    // Prometheus's Python client prints integer parts of more than six
    // digits as Go does: 1e6 is "1000000.0" in Python but "1e+06" on the
    // wire (floatToGoString).
    std::string m = digits.substr(0, 1);
    if (num_digits > 1) m += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e+%02d", point - 1);
    return m + exp;
  }
  if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
  if (point >= num_digits) return sign + digits + std::string(point - num_digits, '0') + ".0";
  return sign + digits.substr(0, point) + "." + digits.substr(point);
}

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

EngineMetrics::EngineMetrics(int max_model_len)
    : time_to_first_token_s(kTtftBuckets),
      time_per_output_token_s(kTokenLatencyBuckets),
      inter_token_latency_s(kTokenLatencyBuckets),
      e2e_request_latency_s(kRequestLatencyBuckets),
      request_queue_time_s(kRequestLatencyBuckets),
      request_prefill_time_s(kRequestLatencyBuckets),
      request_decode_time_s(kRequestLatencyBuckets),
      request_inference_time_s(kRequestLatencyBuckets),
      request_prompt_tokens(buckets_1_2_5(max_model_len)),
      request_generation_tokens(buckets_1_2_5(max_model_len)),
      request_max_tokens(buckets_1_2_5(max_model_len)),
      iteration_tokens(kIterationTokenBuckets),
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
  m.request_prefill_time_s = request_prefill_time_s.snapshot();
  m.request_decode_time_s = request_decode_time_s.snapshot();
  m.request_inference_time_s = request_inference_time_s.snapshot();
  m.request_prompt_tokens = request_prompt_tokens.snapshot();
  m.request_generation_tokens = request_generation_tokens.snapshot();
  m.request_max_tokens = request_max_tokens.snapshot();
  m.iteration_tokens = iteration_tokens.snapshot();
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
  m.grammar_deferred_samples = grammar_deferred_samples.load(std::memory_order_relaxed);
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

std::string format_prometheus(const MetricsSnapshot& m, std::string_view model_name,
                              const MetricsInfoLabels& cache_config) {
  std::string out;
  out.reserve(32768);
  Exposition x(out, "model_name=\"" + escape_label(model_name) + "\",engine=\"0\"");

  // vLLM's series, in the order and with the types its PrometheusStatLogger
  // registers them.
  x.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          static_cast<double>(m.num_requests_running));
  x.gauge("vllm:num_requests_waiting",
          "Number of requests waiting to be processed (preempted ones included).",
          static_cast<double>(m.num_requests_waiting));
  x.gauge("vllm:gpu_cache_usage_perc",
          "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use "
          "vllm:kv_cache_usage_perc instead.",
          m.kv_cache_usage_ratio);
  x.gauge("vllm:kv_cache_usage_perc",
          "KV-cache usage (reserved by requests). 1 means 100 percent usage.",
          m.kv_cache_usage_ratio);
  x.counter("vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<std::uint64_t>(m.prefix_cache_queries));
  x.counter("vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<std::uint64_t>(m.prefix_cache_hits));
  x.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
            m.num_preemptions);
  x.counter("vllm:prompt_tokens_total",
            "Number of prefill tokens processed (counted at a request's first token).",
            m.prompt_tokens);
  x.counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
            m.generation_tokens);
  x.header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (int i = 1; i < kNumFinishReasons; ++i) {  // skip FinishReason::none
    x.sample(
        "vllm:request_success_total",
        "finished_reason=\"" + std::string(finish_reason_name(static_cast<FinishReason>(i))) + "\"",
        std::to_string(m.requests_finished[i]));
  }
  x.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
              m.request_prompt_tokens);
  x.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              m.request_generation_tokens);
  x.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              m.iteration_tokens);
  // vpod runs each of a request's n choices as its own sequence: a choice is
  // its own group, so the group's maximum is the choice's count.
  x.histogram("vllm:request_max_num_generation_tokens",
              "Histogram of maximum number of requested generation tokens.",
              m.request_generation_tokens);
  x.histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
              m.request_max_tokens);
  x.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.time_to_first_token_s);
  // vLLM 0.11 observes inter-token gaps under both names.
  x.histogram("vllm:time_per_output_token_seconds",
              "Histogram of time per output token in seconds. DEPRECATED: Use "
              "vllm:inter_token_latency_seconds instead.",
              m.inter_token_latency_s);
  x.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              m.inter_token_latency_s);
  x.histogram("vllm:request_time_per_output_token_seconds",
              "Histogram of time_per_output_token_seconds per request.", m.time_per_output_token_s);
  x.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              m.e2e_request_latency_s);
  x.histogram("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.", m.request_queue_time_s);
  x.histogram("vllm:request_inference_time_seconds",
              "Histogram of time spent in RUNNING phase for request.", m.request_inference_time_s);
  x.histogram("vllm:request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.", m.request_prefill_time_s);
  x.histogram("vllm:request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.", m.request_decode_time_s);

  if (!cache_config.empty()) {
    // An info gauge: its labels are the settings (and engine), no model_name.
    x.header("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    out += "vllm:cache_config_info{";
    for (const auto& [name, value] : cache_config)
      out += name + "=\"" + escape_label(value) + "\",";
    out += "engine=\"0\"} 1.0\n";
  }

  // vpod's own: how engine steps spend their time.
  x.histogram("vpod_step_duration_seconds", "Wall time of one engine step.", m.step_duration_s);
  x.counter("vpod_steps_total", "Engine steps run.", m.num_steps);
  x.header("vpod_steps_by_kind_total", "counter",
           "Engine steps by what they computed: prompt chunks only (prefill), decodes only "
           "(decode), or both (hybrid).");
  for (int i = 0; i < kNumStepKinds; ++i) {
    x.sample("vpod_steps_by_kind_total",
             "kind=\"" + std::string(step_kind_name(static_cast<StepKind>(i))) + "\"",
             std::to_string(m.steps_by_kind[i]));
  }
  x.counter("vpod_hybrid_step_decodes_total",
            "Decodes summed over hybrid steps (divided by the hybrid steps: their mean decodes).",
            m.hybrid_step_decodes);
  x.counter("vpod_grammar_deferred_samples_total",
            "Structured output: decode rows that sat a step out because their grammar's mask "
            "was not ready when the forward was done.",
            m.grammar_deferred_samples);
  x.header("vpod_step_phase_seconds_total", "counter", "Engine step time by phase.");
  const std::pair<const char*, double> phases[] = {{"schedule", m.step_time_total.schedule_s},
                                                   {"prepare", m.step_time_total.prepare_s},
                                                   {"forward", m.step_time_total.forward_s},
                                                   {"commit", m.step_time_total.commit_s}};
  for (const auto& [name, seconds] : phases) {
    x.sample("vpod_step_phase_seconds_total", std::string("phase=\"") + name + "\"",
             prometheus_float(seconds));
  }
  x.header("vpod_step_host_seconds_total", "counter",
           "Engine host work (schedule, prepare, commit) done while a launched step ran "
           "(hidden) or while none did (exposed: the device waited).");
  const std::pair<const char*, double> overlaps[] = {{"hidden", m.step_time_total.host_hidden_s},
                                                     {"exposed", m.step_time_total.host_exposed_s}};
  for (const auto& [name, seconds] : overlaps) {
    x.sample("vpod_step_host_seconds_total", std::string("overlap=\"") + name + "\"",
             prometheus_float(seconds));
  }
  return out;
}

}  // namespace vpod::engine
