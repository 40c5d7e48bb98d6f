#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.h"

namespace vpod::server {
namespace {

// vLLM's buckets, so dashboards built for it read vpod the same way.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTpotBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                         5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// Label values escape backslash, double quote and newline.
std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, std::string_view name, const std::string& labels, double value) {
  fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels, value);
}

void histogram(std::string& out, std::string_view name, std::string_view help,
               const std::string& labels, const Histogram& h) {
  const Histogram::Snapshot s = h.snapshot();
  header(out, name, "histogram", help);
  for (std::size_t i = 0; i <= s.upper_bounds.size(); ++i) {
    const std::string le =
        i < s.upper_bounds.size() ? fmt::format("{}", s.upper_bounds[i]) : "+Inf";
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le,
                   s.cumulative_counts[i]);
  }
  fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels,
                 s.sum, name, labels, s.count);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  VPOD_CHECK(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()));
}

void Histogram::observe(double value) {
  const std::size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  std::lock_guard lock(mutex_);
  std::uint64_t running = 0;
  for (std::uint64_t c : counts_) {
    running += c;
    s.cumulative_counts.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

ServerMetrics::ServerMetrics()
    : time_to_first_token_(kTtftBuckets),
      time_per_output_token_(kTpotBuckets),
      e2e_request_latency_(kE2eBuckets) {}

void ServerMetrics::observe_sequence(double time_to_first_token_s, double e2e_s, int num_generated,
                                     FinishReason reason) {
  if (num_generated > 0) time_to_first_token_.observe(time_to_first_token_s);
  if (num_generated > 1) {
    time_per_output_token_.observe((e2e_s - time_to_first_token_s) / (num_generated - 1));
  }
  e2e_request_latency_.observe(e2e_s);
  ++finished_by_reason_[static_cast<std::size_t>(reason)];
}

void ServerMetrics::count_http_response(int status) {
  std::lock_guard lock(http_mutex_);
  ++http_responses_[status];
}

std::string ServerMetrics::render(const std::string& model_name, const EngineStats& engine) const {
  const std::string labels = fmt::format("model_name=\"{}\"", escape_label(model_name));
  std::string out;
  out.reserve(8192);
  header(out, "vpod_num_requests_running", "gauge", "Requests in the engine's running batch.");
  sample(out, "vpod_num_requests_running", labels, engine.num_running);
  header(out, "vpod_num_requests_waiting", "gauge", "Requests queued for admission.");
  sample(out, "vpod_num_requests_waiting", labels, engine.num_waiting);
  header(out, "vpod_kv_cache_usage_ratio", "gauge", "Fraction of the KV cache in use, 0 to 1.");
  sample(out, "vpod_kv_cache_usage_ratio", labels, engine.kv_cache_usage);
  header(out, "vpod_num_http_requests_in_flight", "gauge",
         "HTTP requests being served (streams included).");
  sample(out, "vpod_num_http_requests_in_flight", labels, num_http_in_flight.load());

  header(out, "vpod_num_preemptions_total", "counter", "Preemptions by recomputation.");
  sample(out, "vpod_num_preemptions_total", labels, static_cast<double>(engine.num_preemptions));
  header(out, "vpod_prompt_tokens_total", "counter", "Prompt tokens of admitted sequences.");
  sample(out, "vpod_prompt_tokens_total", labels, static_cast<double>(prompt_tokens_.load()));
  header(out, "vpod_generation_tokens_total", "counter", "Generated tokens.");
  sample(out, "vpod_generation_tokens_total", labels,
         static_cast<double>(generation_tokens_.load()));
  header(out, "vpod_request_success_total", "counter", "Finished sequences by finish reason.");
  for (FinishReason r :
       {FinishReason::stop, FinishReason::length, FinishReason::abort, FinishReason::error}) {
    sample(out, "vpod_request_success_total",
           fmt::format("{},finished_reason=\"{}\"", labels, finish_reason_name(r)),
           static_cast<double>(finished_by_reason_[static_cast<std::size_t>(r)].load()));
  }
  header(out, "vpod_http_responses_total", "counter", "HTTP responses by status code.");
  {
    std::lock_guard lock(http_mutex_);
    for (const auto& [status, count] : http_responses_) {
      sample(out, "vpod_http_responses_total", fmt::format("{},status=\"{}\"", labels, status),
             static_cast<double>(count));
    }
  }

  histogram(out, "vpod_time_to_first_token_seconds", "Time to first token.", labels,
            time_to_first_token_);
  histogram(out, "vpod_time_per_output_token_seconds", "Time per output token after the first.",
            labels, time_per_output_token_);
  histogram(out, "vpod_e2e_request_latency_seconds", "End-to-end sequence latency.", labels,
            e2e_request_latency_);
  return out;
}

}  // namespace vpod::server
