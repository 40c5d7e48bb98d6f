// The report's prefix-cache block and per-turn table: what they print for a
// server with counters, one without, and a multi-turn run.
#include "bench/serve/report.h"

#include <gtest/gtest.h>

namespace vpod::bench::serve {
namespace {

TEST(PrefixCacheReport, ServerRateAndMeanCachedTokens) {
  BenchmarkMetrics m;
  m.mean_cached_tokens = 8192.0;
  m.num_cached_reported = 4;
  m.total_cached = 4 * 8192;
  m.total_input_cached_reported = 4 * 8256;
  const std::string text =
      format_prefix_cache(PrefixCacheDelta{"vpod_", 33024.0, 32768.0}, m, false);
  EXPECT_NE(text.find("99.22% (32768 of 33024 tokens)"), std::string::npos) << text;
  EXPECT_NE(text.find("8192.00"), std::string::npos) << text;
  EXPECT_NE(text.find("99.22%"), std::string::npos) << text;
  const nlohmann::json j = prefix_cache_json(PrefixCacheDelta{"vpod_", 33024.0, 32768.0});
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 32768.0 / 33024.0);
  EXPECT_EQ(j["prefix"], "vpod_");
}

TEST(PrefixCacheReport, SaysNotAvailableRatherThanZero) {
  const BenchmarkMetrics none;
  EXPECT_TRUE(format_prefix_cache(std::nullopt, none, false).empty());
  const std::string absent = format_prefix_cache(std::nullopt, none, true);
  EXPECT_NE(absent.find("n/a (no prefix_cache counters)"), std::string::npos) << absent;
  const std::string off = format_prefix_cache(PrefixCacheDelta{"vpod_", 0.0, 0.0}, none, false);
  EXPECT_NE(off.find("n/a (no tokens looked up"), std::string::npos) << off;
  EXPECT_TRUE(prefix_cache_json(std::nullopt).is_null());
  EXPECT_TRUE(prefix_cache_json(PrefixCacheDelta{"vpod_", 0.0, 0.0})["hit_rate"].is_null());
}

TEST(TurnReport, OneRowPerTurnWithTtftAndCachedTokens) {
  TurnMetrics first;
  first.turn = 1;
  first.completed = 8;
  first.mean_input_tokens = 1024.0;
  first.ttft_ms.mean = 80.0;
  first.ttft_ms.median = 79.0;
  first.ttft_ms.percentiles = {{99.0, 95.5}};
  TurnMetrics second;
  second.turn = 2;
  second.completed = 7;
  second.failed = 1;
  second.mean_input_tokens = 2112.0;
  second.mean_cached_tokens = 1088.0;
  second.ttft_ms.mean = 41.25;
  second.ttft_ms.percentiles = {{99.0, 50.0}};
  const std::vector<TurnMetrics> turns = {first, second};
  const std::string text = format_turn_table(turns);
  EXPECT_NE(text.find("P99 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("   1    8/8     1024.0        n/a     80.00     79.00     95.50"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("   2    7/8     2112.0     1088.0     41.25"), std::string::npos) << text;
  const nlohmann::json j = turn_metrics_json(turns);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[0]["mean_cached_tokens"].is_null());
  EXPECT_EQ(j[1]["mean_cached_tokens"], 1088.0);
  EXPECT_EQ(j[1]["failed"], 1);
  EXPECT_EQ(j[0]["p99_ttft_ms"], 95.5);
}

}  // namespace
}  // namespace vpod::bench::serve
