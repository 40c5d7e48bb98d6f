#include "bench/serve/runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

namespace vpod::bench::serve {
namespace {

using namespace std::chrono_literals;

RequestResult sleep_then_succeed(std::chrono::milliseconds duration, int tokens) {
  std::this_thread::sleep_for(duration);
  RequestResult r;
  r.success = true;
  r.output_tokens = tokens;
  return r;
}

TEST(RunRequests, NeverExceedsMaxConcurrencyAndReachesIt) {
  const std::vector<double> at_once(12, 0.0);
  std::mutex mutex;
  int in_flight = 0, most = 0;
  RunProgress progress;
  const RunOutcome out = run_requests(
      at_once, 3,
      [&](int) {
        {
          std::lock_guard lock(mutex);
          most = std::max(most, ++in_flight);
        }
        RequestResult r = sleep_then_succeed(30ms, 2);
        std::lock_guard lock(mutex);
        --in_flight;
        return r;
      },
      progress);
  EXPECT_EQ(most, 3);
  EXPECT_EQ(out.max_in_flight, 3);
  EXPECT_EQ(progress.sent.load(), 12);
  EXPECT_EQ(progress.completed.load(), 12);
  EXPECT_EQ(progress.output_tokens.load(), 24);
  // 12 requests of 30 ms, 3 at a time: at least 4 rounds.
  EXPECT_GE(out.duration_s, 0.120);
}

TEST(RunRequests, UnlimitedConcurrencySendsEverythingTogether) {
  const std::vector<double> at_once(8, 0.0);
  RunProgress progress;
  const RunOutcome out = run_requests(
      at_once, 0, [](int) { return sleep_then_succeed(100ms, 1); }, progress);
  // All in parallel: every request was in flight at once (a wall-clock
  // bound on the duration would fail on a busy machine).
  EXPECT_EQ(out.max_in_flight, 8);
  EXPECT_EQ(progress.completed.load(), 8);
}

TEST(RunRequests, SendsAtTheArrivalTimesAndKeepsResultsInOrder) {
  const std::vector<double> times = {0.0, 0.05, 0.10, 0.20};
  RunProgress progress;
  const RunOutcome out = run_requests(
      times, 0,
      [](int index) {
        RequestResult r;
        r.success = index != 2;
        r.prompt_len = index;
        if (!r.success) r.error = "boom";
        return r;
      },
      progress);
  ASSERT_EQ(out.results.size(), 4u);
  // Never early, and each result in its request's slot. How late a send may
  // be is not asserted, nor the order of send times (each is taken on its
  // own thread): a loaded machine can delay any thread arbitrarily.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out.results[i].prompt_len, i);
    EXPECT_GE(out.results[i].send_time_s, times[i]);
  }
  EXPECT_FALSE(out.results[2].success);
  EXPECT_EQ(progress.failed.load(), 1);
  EXPECT_EQ(progress.completed.load(), 3);
  EXPECT_GE(out.duration_s, 0.20);
}

}  // namespace
}  // namespace vpod::bench::serve
