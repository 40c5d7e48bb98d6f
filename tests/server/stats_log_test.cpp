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
