#include "bench/serve/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>

namespace vpod::bench::serve {
namespace {

const char* kScrape =
    "# HELP vpod_time_to_first_token_seconds Time to first token.\n"
    "# TYPE vpod_time_to_first_token_seconds histogram\n"
    "vpod_time_to_first_token_seconds_bucket{le=\"0.1\"} 3\n"
    "vpod_time_to_first_token_seconds_bucket{le=\"+Inf\"} 10\n"
    "vpod_time_to_first_token_seconds_sum 2.5\n"
    "vpod_time_to_first_token_seconds_count 10\n"
    "vpod_time_to_first_token_seconds_sum_extra 99\n"
    "vllm:e2e_request_latency_seconds_sum{model_name=\"a}b\",engine=\"0\"} 1.5 1712345678\n"
    "vllm:e2e_request_latency_seconds_sum{model_name=\"c\",engine=\"1\"} 0.5\n"
    "vllm:e2e_request_latency_seconds_count{model_name=\"a}b\"} 4\n"
    "  vpod_num_requests_running 2\r\n"
    "vpod_kv_cache_usage_ratio NaN\n";

TEST(Prometheus, ReadsSamplesAndSumsLabelSets) {
  EXPECT_EQ(prometheus_sample(kScrape, "vpod_time_to_first_token_seconds_sum"), 2.5);
  EXPECT_EQ(prometheus_sample(kScrape, "vpod_time_to_first_token_seconds_count"), 10.0);
  EXPECT_EQ(prometheus_sample(kScrape, "vpod_time_to_first_token_seconds_bucket"), 13.0);
  EXPECT_EQ(prometheus_sample(kScrape, "vllm:e2e_request_latency_seconds_sum"), 2.0);
  EXPECT_EQ(prometheus_sample(kScrape, "vpod_num_requests_running"), 2.0);
  EXPECT_FALSE(prometheus_sample(kScrape, "vpod_time_to_first_token").has_value());
  EXPECT_FALSE(prometheus_sample(kScrape, "absent").has_value());
  EXPECT_TRUE(std::isnan(*prometheus_sample(kScrape, "vpod_kv_cache_usage_ratio")));
}

TEST(Prometheus, HistogramMeanBetweenTwoScrapes) {
  const auto before = prometheus_histogram(kScrape, "vpod_time_to_first_token_seconds");
  ASSERT_TRUE(before.has_value());
  const auto after = prometheus_histogram(
      "vpod_time_to_first_token_seconds_sum 4.5\nvpod_time_to_first_token_seconds_count 14\n",
      "vpod_time_to_first_token_seconds");
  ASSERT_TRUE(after.has_value());
  EXPECT_DOUBLE_EQ(*mean_between(*before, *after), 0.5);  // 2 s over 4 new requests
  EXPECT_FALSE(mean_between(*before, *before).has_value());
  EXPECT_FALSE(prometheus_histogram("x_sum 1\n", "x").has_value());
}

TEST(Prometheus, PrefixCacheHitRateBetweenTwoScrapes) {
  const char* before =
      "# TYPE vpod_prefix_cache_queries_total counter\n"
      "vpod_prefix_cache_queries_total 1000\n"
      "# TYPE vpod_prefix_cache_hits_total counter\n"
      "vpod_prefix_cache_hits_total 200\n";
  // 64 requests of 8256 tokens, 8192 of each found: the run's rate, not the
  // counters' lifetime ratio.
  const char* after =
      "vpod_prefix_cache_queries_total 529384\n"
      "vpod_prefix_cache_hits_total 524488\n";
  const auto delta = prefix_cache_between(before, after);
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(delta->prefix, "vpod_");
  EXPECT_DOUBLE_EQ(delta->queries, 64.0 * 8256);
  EXPECT_DOUBLE_EQ(delta->hits, 64.0 * 8192);
  ASSERT_TRUE(delta->hit_rate().has_value());
  EXPECT_DOUBLE_EQ(*delta->hit_rate(), 8192.0 / 8256.0);
}

TEST(Prometheus, PrefixCacheReadsVllmNamesAndSaysWhenThereIsNoRate) {
  const char* before =
      "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 10\n"
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 5\n";
  const char* after =
      "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 110\n"
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 30\n";
  const auto delta = prefix_cache_between(before, after);
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(delta->prefix, "vllm:");
  EXPECT_DOUBLE_EQ(*delta->hit_rate(), 0.25);
  // Caching off: counters present, nothing looked up, no rate (not 0%).
  const char* idle = "vpod_prefix_cache_queries_total 0\nvpod_prefix_cache_hits_total 0\n";
  const auto off = prefix_cache_between(idle, idle);
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->hit_rate().has_value());
  // A server without the counters, or one missing from a scrape: nothing.
  EXPECT_FALSE(prefix_cache_between(kScrape, kScrape).has_value());
  EXPECT_FALSE(prefix_cache_between(idle, "vpod_prefix_cache_queries_total 5\n").has_value());
}

}  // namespace
}  // namespace vpod::bench::serve
