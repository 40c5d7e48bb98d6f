// Drives a benchmark run: sends request i at its arrival time (or as soon as
// one of `max_concurrency` slots frees up, whichever is later), each on its
// own thread so a slow stream never delays the next send, and waits for all.
// The duration runs from the start to the last completion, as vLLM's.
#pragma once

#include <atomic>
#include <functional>
#include <span>
#include <vector>

#include "bench/serve/metrics.h"

namespace vpod::bench::serve {

// Counters a progress display may read while the run goes on.
struct RunProgress {
  std::atomic<int> sent{0};
  std::atomic<int> completed{0};
  std::atomic<int> failed{0};
  std::atomic<long long> output_tokens{0};  // of completed requests
};

struct RunOutcome {
  std::vector<RequestResult> results;  // by request index
  double duration_s = 0.0;
  int max_in_flight = 0;  // the most requests that were in flight at once
};

// Sends request `index`; timings in the result are relative to its own send.
using SendFn = std::function<RequestResult(int index)>;

// max_concurrency <= 0: unlimited.
RunOutcome run_requests(std::span<const double> arrival_times_s, int max_concurrency,
                        const SendFn& send, RunProgress& progress);

}  // namespace vpod::bench::serve
