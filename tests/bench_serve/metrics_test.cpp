#include "bench/serve/metrics.h"

#include <gtest/gtest.h>

#include <vector>

namespace vpod::bench::serve {
namespace {

RequestResult ok(int prompt, int output, double ttft, double latency, std::vector<double> itl) {
  RequestResult r;
  r.success = true;
  r.prompt_len = prompt;
  r.output_tokens = output;
  r.ttft_s = ttft;
  r.latency_s = latency;
  r.itl_s = std::move(itl);
  return r;
}

const std::vector<double> kP99 = {99};

TEST(ComputeMetrics, TpotIsLatencyMinusTtftOverOutputTokensMinusOne) {
  // 11 tokens: 1 s to the first, 2 s more for 10 more -> TPOT 0.2 s.
  const std::vector<RequestResult> results = {ok(100, 11, 1.0, 3.0, {0.1, 0.3})};
  const BenchmarkMetrics m = compute_metrics(results, 4.0, {}, kP99);
  EXPECT_EQ(m.completed, 1);
  EXPECT_DOUBLE_EQ(m.tpot_ms.mean, 200.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 1000.0);
  EXPECT_DOUBLE_EQ(m.e2el_ms.mean, 3000.0);
  EXPECT_DOUBLE_EQ(m.itl_ms.mean, 200.0);  // ITL pools the gaps: (100 + 300) / 2
  EXPECT_EQ(m.itl_ms.count, 2u);
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.25);
  EXPECT_DOUBLE_EQ(m.input_throughput, 25.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 11.0 / 4.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 111.0 / 4.0);
  EXPECT_FALSE(m.request_goodput.has_value());
}

TEST(ComputeMetrics, FailedRequestsCountNowhereAndSingleTokenHasNoTpot) {
  RequestResult failed;
  failed.error = "HTTP 500";
  failed.prompt_len = 1000;
  failed.output_tokens = 50;
  const std::vector<RequestResult> results = {
      ok(10, 1, 0.5, 0.5, {}),          // one token: no TPOT sample
      ok(20, 3, 1.0, 2.0, {0.5, 0.5}),  // TPOT 0.5 s
      failed,
  };
  const BenchmarkMetrics m = compute_metrics(results, 2.0, {}, kP99);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 30);
  EXPECT_EQ(m.total_output, 4);
  EXPECT_EQ(m.tpot_ms.count, 1u);
  EXPECT_DOUBLE_EQ(m.tpot_ms.mean, 500.0);
  EXPECT_EQ(m.ttft_ms.count, 2u);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 750.0);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
}

TEST(ComputeMetrics, GoodputCountsRequestsWithinEverySlo) {
  // Binary-exact times, so the boundary cases are exact.
  const std::vector<RequestResult> results = {
      ok(1, 5, 0.125, 0.375, {}),  // TTFT 125 ms, TPOT 62.5 ms: good
      ok(1, 5, 0.5, 0.75, {}),     // TTFT 500 ms: bad
      ok(1, 5, 0.125, 1.125, {}),  // TPOT 250 ms: bad
      ok(1, 1, 0.25, 0.25, {}),    // one token: TPOT 0, TTFT at the SLO: good
      ok(1, 5, 0.25, 0.75, {}),    // exactly at both SLOs: good (<=)
  };
  Slo slo;
  slo.ttft_ms = 250.0;
  slo.tpot_ms = 125.0;
  const BenchmarkMetrics m = compute_metrics(results, 10.0, slo, kP99);
  EXPECT_EQ(m.good_completed, 3);
  ASSERT_TRUE(m.request_goodput.has_value());
  EXPECT_DOUBLE_EQ(*m.request_goodput, 0.3);

  Slo e2e;
  e2e.e2el_ms = 750.0;  // all but the 1.125 s one
  EXPECT_EQ(compute_metrics(results, 10.0, e2e, kP99).good_completed, 4);
}

TEST(ComputeMetrics, MeanCachedTokensOverTheRequestsThatReportThem) {
  std::vector<RequestResult> results = {ok(8256, 16, 0.02, 0.2, {}), ok(8256, 16, 0.03, 0.2, {}),
                                        ok(100, 16, 0.01, 0.2, {})};
  results[0].cached_tokens = 8192;
  results[1].cached_tokens = 8160;
  RequestResult failed;  // a failed request's usage counts nowhere
  failed.cached_tokens = 5;
  results.push_back(failed);
  const BenchmarkMetrics m = compute_metrics(results, 1.0, {}, kP99);
  EXPECT_EQ(m.num_cached_reported, 2);
  EXPECT_EQ(m.total_cached, 8192 + 8160);
  EXPECT_EQ(m.total_input_cached_reported, 2 * 8256);
  ASSERT_TRUE(m.mean_cached_tokens.has_value());
  EXPECT_DOUBLE_EQ(*m.mean_cached_tokens, 8176.0);
  // No request reported cached_tokens (a server without prefix caching).
  const std::vector<RequestResult> plain = {ok(1, 1, 0.1, 0.1, {})};
  EXPECT_FALSE(compute_metrics(plain, 1.0, {}, kP99).mean_cached_tokens.has_value());
}

TEST(ComputeTurnMetrics, GroupsResultsByTurnAcrossConversations) {
  // Two conversations of three turns, conversation-major; conversation 1
  // failed at turn 3.
  std::vector<RequestResult> results = {
      ok(100, 8, 0.10, 0.5, {}), ok(210, 8, 0.02, 0.5, {}), ok(320, 8, 0.03, 0.5, {}),
      ok(120, 8, 0.30, 0.5, {}), ok(230, 8, 0.04, 0.5, {}), RequestResult{},
  };
  results[1].cached_tokens = 96;
  results[4].cached_tokens = 112;
  results[2].cached_tokens = 208;
  const std::vector<TurnMetrics> turns = compute_turn_metrics(results, 3, kP99);
  ASSERT_EQ(turns.size(), 3u);
  EXPECT_EQ(turns[0].turn, 1);
  EXPECT_EQ(turns[0].completed, 2);
  EXPECT_DOUBLE_EQ(turns[0].mean_input_tokens, 110.0);
  EXPECT_DOUBLE_EQ(turns[0].ttft_ms.mean, 200.0);
  EXPECT_FALSE(turns[0].mean_cached_tokens.has_value());
  EXPECT_DOUBLE_EQ(turns[1].mean_input_tokens, 220.0);
  EXPECT_DOUBLE_EQ(*turns[1].mean_cached_tokens, 104.0);
  EXPECT_DOUBLE_EQ(turns[1].ttft_ms.mean, 30.0);
  EXPECT_EQ(turns[2].completed, 1);
  EXPECT_EQ(turns[2].failed, 1);
  EXPECT_DOUBLE_EQ(turns[2].ttft_ms.mean, 30.0);
  EXPECT_DOUBLE_EQ(*turns[2].mean_cached_tokens, 208.0);
}

TEST(ParseSlo, AcceptsCommaOrSpaceSeparatedKeys) {
  const auto slo = parse_slo("ttft:200,tpot:50");
  ASSERT_TRUE(slo.ok()) << slo.status().to_string();
  EXPECT_DOUBLE_EQ(*slo->ttft_ms, 200.0);
  EXPECT_DOUBLE_EQ(*slo->tpot_ms, 50.0);
  EXPECT_FALSE(slo->e2el_ms.has_value());
  const auto spaced = parse_slo("e2el:1500.5 ttft:10");
  ASSERT_TRUE(spaced.ok());
  EXPECT_DOUBLE_EQ(*spaced->e2el_ms, 1500.5);
  EXPECT_DOUBLE_EQ(*spaced->ttft_ms, 10.0);
}

TEST(ParseSlo, RejectsMalformedInput) {
  for (const char* bad : {"", "ttft", "ttft:", "ttft:abc", "ttft:-5", "ttft:0", "itl:5",
                          "ttft:5,ttft:6", "ttft:5ms"}) {
    const auto slo = parse_slo(bad);
    EXPECT_FALSE(slo.ok()) << bad;
    if (!slo.ok()) {
      EXPECT_EQ(slo.status().code(), StatusCode::invalid_argument);
    }
  }
}

}  // namespace
}  // namespace vpod::bench::serve
