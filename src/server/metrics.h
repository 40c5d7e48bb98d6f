// Prometheus metrics of the server, rendered as the text exposition format
// (version 0.0.4) at GET /metrics. Every name starts with `vpod_` and carries
// the label model_name, as vLLM's carry theirs.
//
// The server measures what it sees of each sequence (time to first token,
// time per output token, end-to-end latency, token counts, finish reasons);
// the engine reports what only it knows (running and waiting requests, KV
// usage, preemptions) through EngineStats at scrape time.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/backend.h"

namespace vpod::server {

// A cumulative histogram with fixed upper bounds (seconds). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<std::uint64_t> cumulative_counts;  // per bound, then +Inf
    std::uint64_t count = 0;
    double sum = 0.0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> counts_;  // per bucket (not cumulative), last is +Inf
  double sum_ = 0.0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // One sequence's timeline, recorded when it finishes.
  void observe_sequence(double time_to_first_token_s, double e2e_s, int num_generated,
                        FinishReason reason);
  void add_prompt_tokens(std::uint64_t n) { prompt_tokens_ += n; }
  void add_generation_tokens(std::uint64_t n) { generation_tokens_ += n; }
  void count_http_response(int status);

  // HTTP requests being served right now (streams included).
  std::atomic<int> num_http_in_flight{0};

  std::string render(const std::string& model_name, const EngineStats& engine) const;

 private:
  Histogram time_to_first_token_;
  Histogram time_per_output_token_;
  Histogram e2e_request_latency_;
  std::atomic<std::uint64_t> prompt_tokens_{0};
  std::atomic<std::uint64_t> generation_tokens_{0};
  std::array<std::atomic<std::uint64_t>, 5> finished_by_reason_{};  // indexed by FinishReason
  mutable std::mutex http_mutex_;
  std::map<int, std::uint64_t> http_responses_;  // by status code
};

}  // namespace vpod::server
