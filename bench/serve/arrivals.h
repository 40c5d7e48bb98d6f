// When each request is sent. As `vllm bench serve`: the gaps between
// requests are Gamma(shape = burstiness, scale = 1 / (rate * burstiness)),
// so their mean is 1 / rate whatever the burstiness; burstiness 1 is a
// Poisson process (exponential gaps), below 1 burstier, above 1 more uniform
// (the gaps' coefficient of variation is 1 / sqrt(burstiness)). An infinite
// rate sends everything at once. (Unlike vLLM's newest version, the gaps are
// not rescaled so that the last send lands exactly at n / rate.)
#pragma once

#include <cstdint>
#include <vector>

namespace vpod::bench::serve {

// Send times in seconds from the start, for `num_requests` requests; the
// first is sent at 0. rate > 0 (may be +inf), burstiness > 0.
std::vector<double> arrival_times(int num_requests, double rate, double burstiness,
                                  std::uint64_t seed);

}  // namespace vpod::bench::serve
