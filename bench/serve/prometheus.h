// Reading a server's GET /metrics (Prometheus text format 0.0.4) to compare
// what the client measured with what the server recorded: the mean of a
// histogram over the run is (sum_after - sum_before) / (count_after -
// count_before), and the prefix cache's hit rate over the run is the growth
// of its hits counter over the growth of its queries counter.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vpod::bench::serve {

// The value of sample `name` (e.g. "vllm:time_to_first_token_seconds_sum"),
// summed over all its label sets; nullopt when no sample has that name.
std::optional<double> prometheus_sample(std::string_view text, std::string_view name);

struct HistogramTotals {
  double sum = 0.0;
  double count = 0.0;
};

// `<histogram>_sum` and `<histogram>_count`; nullopt unless both exist.
std::optional<HistogramTotals> prometheus_histogram(std::string_view text,
                                                    std::string_view histogram);

// Mean of the observations made between two scrapes; nullopt when none were.
std::optional<double> mean_between(const HistogramTotals& before, const HistogramTotals& after);

// The prefix cache between two scrapes, in prompt tokens, from the counters
// `<prefix>prefix_cache_queries_total` (tokens looked up at admission) and
// `<prefix>prefix_cache_hits_total` (tokens found), as vLLM names them;
// `prefix` is "vpod_" or "vllm:".
struct PrefixCacheDelta {
  std::string prefix;
  double queries = 0.0;
  double hits = 0.0;
  // hits / queries; nullopt when nothing was looked up (e.g. caching off).
  std::optional<double> hit_rate() const {
    if (!(queries > 0.0)) return std::nullopt;
    return hits / queries;
  }
};

// nullopt when neither vpod's nor vLLM's counters are in both scrapes.
std::optional<PrefixCacheDelta> prefix_cache_between(std::string_view before,
                                                     std::string_view after);

}  // namespace vpod::bench::serve
