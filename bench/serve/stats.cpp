// Summary statistics (stats.h) with NumPy's definitions.
#include "bench/serve/stats.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace vpod::bench::serve {

double percentile(std::span<const double> sorted, double p) {
  VPOD_CHECK(p >= 0.0 && p <= 100.0);
  if (sorted.empty()) return 0.0;
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary summarize(std::vector<double> values, std::span<const double> percentiles, double scale) {
  Summary s;
  s.count = values.size();
  for (double& v : values) v *= scale;
  std::sort(values.begin(), values.end());
  if (!values.empty()) {
    double sum = 0.0;
    for (double v : values) sum += v;
    s.mean = sum / static_cast<double>(values.size());
    double squares = 0.0;
    for (double v : values) squares += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(squares / static_cast<double>(values.size()));
  }
  s.median = percentile(values, 50.0);
  for (double p : percentiles) s.percentiles.emplace_back(p, percentile(values, p));
  return s;
}

}  // namespace vpod::bench::serve
