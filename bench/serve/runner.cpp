// The benchmark runner (runner.h): sending each request, or each chain of
// dependent requests, at its arrival time within the concurrency limit, and
// collecting the results in order.
#include "bench/serve/runner.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/check.h"

namespace vpod::bench::serve {

RunOutcome run_requests(std::span<const double> arrival_times_s, int max_concurrency,
                        const SendFn& send, RunProgress& progress) {
  return run_chains(
      arrival_times_s, 1, max_concurrency, [&](int chain, int) { return send(chain); }, progress);
}

RunOutcome run_chains(std::span<const double> arrival_times_s, int num_steps, int max_concurrency,
                      const SendStepFn& send, RunProgress& progress) {
  VPOD_CHECK(num_steps >= 1);
  using Clock = std::chrono::steady_clock;
  const int num_chains = static_cast<int>(arrival_times_s.size());
  RunOutcome outcome;
  outcome.results.resize(static_cast<std::size_t>(num_chains) * num_steps);

  std::mutex mutex;
  std::condition_variable slot_freed;
  int in_flight = 0;  // guarded by mutex

  std::vector<std::thread> workers;
  workers.reserve(num_chains);
  const Clock::time_point start = Clock::now();
  for (int c = 0; c < num_chains; ++c) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(arrival_times_s[c])));
    {
      std::unique_lock lock(mutex);
      if (max_concurrency > 0) {
        slot_freed.wait(lock, [&] { return in_flight < max_concurrency; });
      }
      ++in_flight;
      outcome.max_in_flight = std::max(outcome.max_in_flight, in_flight);
    }
    workers.emplace_back([&, c] {
      // Each result is written by this thread only, at its own index.
      RequestResult* results = outcome.results.data() + static_cast<std::size_t>(c) * num_steps;
      for (int s = 0; s < num_steps; ++s) {
        RequestResult& result = results[s];
        if (s > 0 && !results[s - 1].success) {
          result.error = fmt::format("not sent: step {} of this chain failed", s);
          // Counted as sent and failed, so sent - completed - failed stays
          // the number in flight.
          progress.sent.fetch_add(1, std::memory_order_relaxed);
          progress.failed.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        progress.sent.fetch_add(1, std::memory_order_relaxed);
        const double send_time_s = std::chrono::duration<double>(Clock::now() - start).count();
        result = send(c, s);
        result.send_time_s = send_time_s;
        if (result.success) {
          progress.output_tokens.fetch_add(result.output_tokens, std::memory_order_relaxed);
          progress.completed.fetch_add(1, std::memory_order_relaxed);
        } else {
          progress.failed.fetch_add(1, std::memory_order_relaxed);
        }
      }
      {
        std::lock_guard lock(mutex);
        --in_flight;
      }
      slot_freed.notify_one();
    });
  }
  for (std::thread& worker : workers) worker.join();
  outcome.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

}  // namespace vpod::bench::serve
