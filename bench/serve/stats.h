// Summary statistics as `vllm bench serve` computes them with NumPy: mean,
// population standard deviation, median and percentiles with linear
// interpolation between closest ranks (numpy.percentile's default).
#pragma once

#include <span>
#include <utility>
#include <vector>

namespace vpod::bench::serve {

// numpy.percentile(values, p) for `sorted` ascending and p in [0, 100]:
// rank = p/100 * (n - 1), interpolated linearly between its neighbours.
// An empty input gives 0 (vLLM calls NumPy on `values or 0`).
double percentile(std::span<const double> sorted, double p);

struct Summary {
  std::size_t count = 0;
  double mean = 0.0;
  double std = 0.0;  // population (ddof = 0), as numpy.std
  double median = 0.0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value), in the order asked
};

// Mean, std, median and the asked percentiles of `values`, each multiplied by
// `scale` (e.g. 1000 for seconds -> milliseconds). Empty input: all zero.
Summary summarize(std::vector<double> values, std::span<const double> percentiles,
                  double scale = 1.0);

}  // namespace vpod::bench::serve
