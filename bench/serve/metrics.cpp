// The benchmark's metrics (metrics.h), computed from the per-request
// measurements as `vllm bench serve` computes them.
#include "bench/serve/metrics.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "common/check.h"

namespace vpod::bench::serve {
namespace {

constexpr double kMsPerS = 1000.0;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<Slo> parse_slo(std::string_view text) {
  Slo slo;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find_first_of(", ", pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) continue;
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      return invalid_argument(fmt::format("SLO '{}' is not KEY:MILLISECONDS", item));
    }
    const std::string_view key = item.substr(0, colon);
    const std::string value_text(item.substr(colon + 1));
    double value = 0.0;
    const auto [ptr, ec] =
        std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
    if (ec != std::errc() || ptr != value_text.data() + value_text.size() ||
        !std::isfinite(value) || value <= 0.0) {
      return invalid_argument(
          fmt::format("SLO '{}': '{}' is not a positive number of milliseconds", key, value_text));
    }
    std::optional<double>* target = nullptr;
    if (key == "ttft") target = &slo.ttft_ms;
    if (key == "tpot") target = &slo.tpot_ms;
    if (key == "e2el") target = &slo.e2el_ms;
    if (target == nullptr) {
      return invalid_argument(fmt::format("unknown SLO '{}' (known: ttft, tpot, e2el)", key));
    }
    if (target->has_value()) return invalid_argument(fmt::format("SLO '{}' given twice", key));
    *target = value;
  }
  if (slo.empty()) return invalid_argument("empty SLO: expected e.g. ttft:200,tpot:50");
  return slo;
}

BenchmarkMetrics compute_metrics(std::span<const RequestResult> results, double duration_s,
                                 const Slo& slo, std::span<const double> percentiles) {
  BenchmarkMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += r.prompt_len;
    m.total_output += r.output_tokens;
    // vLLM: TPOT only over requests with more than one output token; for
    // goodput a single-token request has TPOT 0.
    double tpot = 0.0;
    if (r.output_tokens > 1) {
      tpot = (r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
      tpots.push_back(tpot);
    }
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.latency_s);
    if (r.cached_tokens) {
      ++m.num_cached_reported;
      m.total_cached += *r.cached_tokens;
      m.total_input_cached_reported += r.prompt_len;
    }
    if (!slo.empty()) {
      const bool good = (!slo.ttft_ms || r.ttft_s * kMsPerS <= *slo.ttft_ms) &&
                        (!slo.tpot_ms || tpot * kMsPerS <= *slo.tpot_ms) &&
                        (!slo.e2el_ms || r.latency_s * kMsPerS <= *slo.e2el_ms);
      if (good) ++m.good_completed;
    }
  }
  if (duration_s > 0.0) {
    m.request_throughput = m.completed / duration_s;
    m.input_throughput = static_cast<double>(m.total_input) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
    if (!slo.empty()) m.request_goodput = m.good_completed / duration_s;
  } else if (!slo.empty()) {
    m.request_goodput = 0.0;
  }
  m.ttft_ms = summarize(std::move(ttfts), percentiles, kMsPerS);
  m.tpot_ms = summarize(std::move(tpots), percentiles, kMsPerS);
  m.itl_ms = summarize(std::move(itls), percentiles, kMsPerS);
  m.e2el_ms = summarize(std::move(e2els), percentiles, kMsPerS);
  if (m.num_cached_reported > 0) {
    m.mean_cached_tokens = static_cast<double>(m.total_cached) / m.num_cached_reported;
  }
  return m;
}

std::vector<TurnMetrics> compute_turn_metrics(std::span<const RequestResult> results, int num_turns,
                                              std::span<const double> percentiles) {
  VPOD_CHECK(num_turns >= 1 && results.size() % num_turns == 0);
  std::vector<TurnMetrics> turns(num_turns);
  for (int t = 0; t < num_turns; ++t) {
    TurnMetrics& tm = turns[t];
    tm.turn = t + 1;
    std::vector<double> ttfts;
    long long input = 0, cached = 0;
    int cached_reported = 0;
    for (std::size_t i = t; i < results.size(); i += num_turns) {
      const RequestResult& r = results[i];
      if (!r.success) {
        ++tm.failed;
        continue;
      }
      ++tm.completed;
      input += r.prompt_len;
      ttfts.push_back(r.ttft_s);
      if (r.cached_tokens) {
        ++cached_reported;
        cached += *r.cached_tokens;
      }
    }
    if (tm.completed > 0) tm.mean_input_tokens = static_cast<double>(input) / tm.completed;
    if (cached_reported > 0) tm.mean_cached_tokens = static_cast<double>(cached) / cached_reported;
    tm.ttft_ms = summarize(std::move(ttfts), percentiles, kMsPerS);
  }
  return turns;
}

}  // namespace vpod::bench::serve
