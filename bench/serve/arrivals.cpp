// Arrival times (arrivals.h): Gamma-distributed gaps at a rate, or all at
// once, from a seeded generator.
#include "bench/serve/arrivals.h"

#include <cmath>
#include <random>

#include "common/check.h"

namespace vpod::bench::serve {

std::vector<double> arrival_times(int num_requests, double rate, double burstiness,
                                  std::uint64_t seed) {
  VPOD_CHECK(num_requests >= 0 && rate > 0.0 && burstiness > 0.0);
  std::vector<double> times(num_requests, 0.0);
  if (std::isinf(rate)) return times;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (int i = 1; i < num_requests; ++i) times[i] = times[i - 1] + gap(rng);
  return times;
}

}  // namespace vpod::bench::serve
