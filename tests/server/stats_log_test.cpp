// The periodic stats line: rates over the interval, silence when idle.
#include "server/stats_log.h"

#include <gtest/gtest.h>

namespace vpod::server {
namespace {

TEST(StatsLine, ReportsRatesOverTheInterval) {
  engine::MetricsSnapshot before;
  before.prompt_tokens = 1000;
  before.generation_tokens = 50;
  engine::MetricsSnapshot now = before;
  now.prompt_tokens = 3000;
  now.generation_tokens = 550;
  now.num_requests_running = 7;
  now.num_requests_waiting = 2;
  now.kv_cache_usage_ratio = 0.125;
  const auto line = stats_line(before, now, 10.0);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line,
            "Avg prompt throughput: 200.0 tokens/s, Avg generation throughput: 50.0 tokens/s, "
            "Running: 7 reqs, Waiting: 2 reqs, KV cache usage: 12.5%");
}

// vLLM's "Prefix cache hit rate": hits over queries of the interval's
// admissions (of the whole run when the interval admitted nothing); no
// field while nothing was ever looked up (prefix caching off).
TEST(StatsLine, PrefixCacheHitRate) {
  engine::MetricsSnapshot before;
  before.num_requests_running = 1;
  before.prefix_cache_queries = 1000;
  before.prefix_cache_hits = 100;
  engine::MetricsSnapshot now = before;
  now.prefix_cache_queries = 1400;
  now.prefix_cache_hits = 400;
  auto line = stats_line(before, now, 10.0);
  ASSERT_TRUE(line.has_value());
  EXPECT_TRUE(line->ends_with("KV cache usage: 0.0%, Prefix cache hit rate: 75.0%")) << *line;
  line = stats_line(now, now, 10.0);  // nothing admitted: the run's rate
  ASSERT_TRUE(line.has_value());
  EXPECT_TRUE(line->ends_with(", Prefix cache hit rate: 28.6%")) << *line;
  engine::MetricsSnapshot off;
  off.num_requests_running = 1;
  line = stats_line(off, off, 10.0);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->find("Prefix cache"), std::string::npos) << *line;
}

TEST(StatsLine, SilentWhileIdleButNotWhileRequestsWait) {
  engine::MetricsSnapshot idle;
  idle.prompt_tokens = 10;
  EXPECT_FALSE(stats_line(idle, idle, 10.0).has_value());
  engine::MetricsSnapshot waiting = idle;
  waiting.num_requests_waiting = 1;  // queued, nothing processed yet: still worth a line
  EXPECT_TRUE(stats_line(idle, waiting, 10.0).has_value());
  // The interval in which the last request finished is reported too.
  EXPECT_TRUE(stats_line(waiting, idle, 10.0).has_value());
}

}  // namespace
}  // namespace vpod::server
