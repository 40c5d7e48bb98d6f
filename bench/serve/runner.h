// Drives a benchmark run: sends request i at its arrival time (or as soon as
// one of `max_concurrency` slots frees up, whichever is later), each on its
// own thread so a slow stream never delays the next send, and waits for all.
// A chain (a multi-turn conversation) is a request whose successors depend on
// its reply: it takes one slot at its arrival time and sends its steps one
// after another on that thread, step s + 1 only once step s's reply arrived.
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
  std::vector<RequestResult> results;  // by request index (chains: chain-major)
  double duration_s = 0.0;
  int max_in_flight = 0;  // the most requests that were in flight at once
};

// Sends request `index`; timings in the result are relative to its own send.
using SendFn = std::function<RequestResult(int index)>;

// max_concurrency <= 0: unlimited.
RunOutcome run_requests(std::span<const double> arrival_times_s, int max_concurrency,
                        const SendFn& send, RunProgress& progress);

// Sends step `step` of chain `chain`, after every earlier step of that chain
// succeeded.
using SendStepFn = std::function<RequestResult(int chain, int step)>;

// Chain c starts at arrival_times_s[c] within the concurrency limit (counted
// in chains, each of which has one request in flight at a time) and runs its
// `num_steps` steps in order. Results: chain c's step s at c * num_steps + s.
// After a failed step the chain stops; its later steps are failed results
// saying so, never sent.
RunOutcome run_chains(std::span<const double> arrival_times_s, int num_steps, int max_concurrency,
                      const SendStepFn& send, RunProgress& progress);

}  // namespace vpod::bench::serve
