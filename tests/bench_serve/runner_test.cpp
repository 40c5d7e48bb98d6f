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

TEST(RunChains, EachStepIsSentOnlyAfterThePreviousReplyAndResultsAreChainMajor) {
  constexpr int kChains = 5, kSteps = 4;
  const std::vector<double> at_once(kChains, 0.0);
  std::mutex mutex;
  std::vector<std::vector<int>> replied(kChains);  // steps whose reply arrived, in order
  int in_flight = 0, most = 0;
  bool sent_early = false;
  RunProgress progress;
  const RunOutcome out = run_chains(
      at_once, kSteps, 2,
      [&](int chain, int step) {
        {
          std::lock_guard lock(mutex);
          // Every earlier step of this chain has replied, and no later one started.
          if (static_cast<int>(replied[chain].size()) != step) sent_early = true;
          most = std::max(most, ++in_flight);
        }
        std::this_thread::sleep_for(5ms);
        RequestResult r;
        r.success = true;
        r.prompt_len = chain * 100 + step;
        r.output_tokens = 1;
        std::lock_guard lock(mutex);
        --in_flight;
        replied[chain].push_back(step);
        return r;
      },
      progress);
  EXPECT_FALSE(sent_early);
  // The limit counts chains, each with one request in flight. (Whether it is
  // reached depends on thread timing, so only the bound is asserted.)
  EXPECT_LE(most, 2);
  EXPECT_LE(out.max_in_flight, 2);
  ASSERT_EQ(out.results.size(), static_cast<std::size_t>(kChains * kSteps));
  for (int c = 0; c < kChains; ++c) {
    EXPECT_EQ(replied[c], (std::vector<int>{0, 1, 2, 3}));
    for (int s = 0; s < kSteps; ++s) EXPECT_EQ(out.results[c * kSteps + s].prompt_len, c * 100 + s);
  }
  EXPECT_EQ(progress.sent.load(), kChains * kSteps);
  EXPECT_EQ(progress.completed.load(), kChains * kSteps);
}

TEST(RunChains, AChainStopsAtItsFirstFailure) {
  const std::vector<double> at_once(2, 0.0);
  std::mutex mutex;
  std::vector<std::pair<int, int>> sent;
  RunProgress progress;
  const RunOutcome out = run_chains(
      at_once, 3, 0,
      [&](int chain, int step) {
        {
          std::lock_guard lock(mutex);
          sent.emplace_back(chain, step);
        }
        RequestResult r;
        r.success = !(chain == 1 && step == 1);
        if (!r.success) r.error = "HTTP 500";
        return r;
      },
      progress);
  EXPECT_EQ(sent.size(), 5u);  // chain 1's step 2 never went out
  EXPECT_TRUE(out.results[3].success);
  EXPECT_EQ(out.results[4].error, "HTTP 500");
  EXPECT_FALSE(out.results[5].success);
  EXPECT_NE(out.results[5].error.find("not sent"), std::string::npos) << out.results[5].error;
  EXPECT_EQ(progress.completed.load(), 4);
  EXPECT_EQ(progress.failed.load(), 2);
  EXPECT_EQ(progress.sent.load() - progress.completed.load() - progress.failed.load(), 0);
}

}  // namespace
}  // namespace vpod::bench::serve
