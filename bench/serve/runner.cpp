// The benchmark runner (runner.h): sending each request at its arrival time
// within the concurrency limit, and collecting the results in order.
#include "bench/serve/runner.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace vpod::bench::serve {

RunOutcome run_requests(std::span<const double> arrival_times_s, int max_concurrency,
                        const SendFn& send, RunProgress& progress) {
  using Clock = std::chrono::steady_clock;
  const int num_requests = static_cast<int>(arrival_times_s.size());
  RunOutcome outcome;
  outcome.results.resize(num_requests);

  std::mutex mutex;
  std::condition_variable slot_freed;
  int in_flight = 0;  // guarded by mutex

  std::vector<std::thread> workers;
  workers.reserve(num_requests);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < num_requests; ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(arrival_times_s[i])));
    {
      std::unique_lock lock(mutex);
      if (max_concurrency > 0) {
        slot_freed.wait(lock, [&] { return in_flight < max_concurrency; });
      }
      ++in_flight;
      outcome.max_in_flight = std::max(outcome.max_in_flight, in_flight);
    }
    progress.sent.fetch_add(1, std::memory_order_relaxed);
    workers.emplace_back([&, i] {
      const double send_time_s = std::chrono::duration<double>(Clock::now() - start).count();
      RequestResult result = send(i);
      result.send_time_s = send_time_s;
      if (result.success) {
        progress.output_tokens.fetch_add(result.output_tokens, std::memory_order_relaxed);
        progress.completed.fetch_add(1, std::memory_order_relaxed);
      } else {
        progress.failed.fetch_add(1, std::memory_order_relaxed);
      }
      outcome.results[i] = std::move(result);
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
