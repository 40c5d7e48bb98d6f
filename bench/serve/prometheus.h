// Reading a server's GET /metrics (Prometheus text format 0.0.4) to compare
// what the client measured with what the server recorded: the mean of a
// histogram over the run is (sum_after - sum_before) / (count_after -
// count_before).
#pragma once

#include <optional>
#include <string_view>

namespace vpod::bench::serve {

// The value of sample `name` (e.g. "vpod_time_to_first_token_seconds_sum"),
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

}  // namespace vpod::bench::serve
