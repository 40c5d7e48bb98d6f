#include "bench/serve/arrivals.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace vpod::bench::serve {
namespace {

struct GapStats {
  double mean = 0.0;
  double cv = 0.0;  // standard deviation / mean
};

GapStats gap_stats(const std::vector<double>& times) {
  std::vector<double> gaps;
  for (std::size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  double sum = 0.0;
  for (double g : gaps) sum += g;
  const double mean = sum / gaps.size();
  double sq = 0.0;
  for (double g : gaps) sq += (g - mean) * (g - mean);
  return {mean, std::sqrt(sq / gaps.size()) / mean};
}

constexpr int kSamples = 40000;

TEST(ArrivalTimes, InfiniteRateSendsEverythingAtOnce) {
  const auto t = arrival_times(5, std::numeric_limits<double>::infinity(), 1.0, 1);
  EXPECT_EQ(t, std::vector<double>(5, 0.0));
}

TEST(ArrivalTimes, StartAtZeroAndNeverGoBack) {
  const auto t = arrival_times(1000, 4.0, 0.5, 2);
  ASSERT_EQ(t.size(), 1000u);
  EXPECT_EQ(t[0], 0.0);
  for (std::size_t i = 1; i < t.size(); ++i) EXPECT_GE(t[i], t[i - 1]);
}

TEST(ArrivalTimes, PoissonGapsAreExponentialWithMeanOneOverRate) {
  const auto t = arrival_times(kSamples, 8.0, 1.0, 3);
  const GapStats s = gap_stats(t);
  EXPECT_NEAR(s.mean, 1.0 / 8.0, 0.02 / 8.0);
  EXPECT_NEAR(s.cv, 1.0, 0.03);  // exponential: CV 1
  // Memorylessness: P(gap > 2 / rate) = e^-2.
  int longer = 0;
  for (std::size_t i = 1; i < t.size(); ++i) longer += (t[i] - t[i - 1]) > 2.0 / 8.0;
  EXPECT_NEAR(static_cast<double>(longer) / (kSamples - 1), std::exp(-2.0), 0.01);
}

TEST(ArrivalTimes, BurstinessKeepsTheRateAndSetsTheVariation) {
  for (double burstiness : {0.25, 0.5, 2.0, 4.0}) {
    const GapStats s = gap_stats(arrival_times(kSamples, 2.0, burstiness, 4));
    EXPECT_NEAR(s.mean, 0.5, 0.5 * 0.04) << burstiness;
    EXPECT_NEAR(s.cv, 1.0 / std::sqrt(burstiness), 0.06 / std::sqrt(burstiness)) << burstiness;
  }
}

TEST(ArrivalTimes, SameSeedSameScheduleOtherSeedOther) {
  EXPECT_EQ(arrival_times(100, 3.0, 1.0, 7), arrival_times(100, 3.0, 1.0, 7));
  EXPECT_NE(arrival_times(100, 3.0, 1.0, 7), arrival_times(100, 3.0, 1.0, 8));
}

}  // namespace
}  // namespace vpod::bench::serve
