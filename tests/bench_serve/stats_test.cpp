#include "bench/serve/stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace vpod::bench::serve {
namespace {

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], p) for p = 0, 50, 90, 99, 100.
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  // numpy.percentile([10, 20, 40], 25) == 15; 75 -> 30.
  const std::vector<double> w = {10, 20, 40};
  EXPECT_DOUBLE_EQ(percentile(w, 25), 15.0);
  EXPECT_DOUBLE_EQ(percentile(w, 75), 30.0);
  const std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(percentile(one, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
}

TEST(Summarize, MeanPopulationStdMedianAndScale) {
  const std::vector<double> p = {90, 99};
  // Unsorted on purpose; std with ddof=0 of this classic set is exactly 2.
  const Summary s = summarize({9, 2, 4, 4, 5, 4, 7, 5}, p, 1000.0);
  EXPECT_EQ(s.count, 8u);
  EXPECT_DOUBLE_EQ(s.mean, 5000.0);
  EXPECT_DOUBLE_EQ(s.std, 2000.0);
  EXPECT_DOUBLE_EQ(s.median, 4500.0);
  ASSERT_EQ(s.percentiles.size(), 2u);
  EXPECT_DOUBLE_EQ(s.percentiles[0].first, 90.0);
  // sorted: 2 4 4 4 5 5 7 9; rank 6.3 -> 7 + 0.3 * 2 = 7.6; rank 6.93 -> 8.86.
  EXPECT_NEAR(s.percentiles[0].second, 7600.0, 1e-9);
  EXPECT_NEAR(s.percentiles[1].second, 8860.0, 1e-9);
}

TEST(Summarize, EmptyIsAllZero) {
  const std::vector<double> p = {99};
  const Summary s = summarize({}, p);
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.mean, 0.0);
  EXPECT_EQ(s.std, 0.0);
  EXPECT_EQ(s.median, 0.0);
  EXPECT_EQ(s.percentiles[0].second, 0.0);
}

}  // namespace
}  // namespace vpod::bench::serve
