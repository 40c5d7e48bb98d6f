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

}  // namespace
}  // namespace vpod::bench::serve
