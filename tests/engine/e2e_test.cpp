// End to end on the CPU backend: the tiny Llama-3 model (random weights from
// make-model, the real Llama-3 tokenizer), each KV store - the vAttention
// cache on the host VMM provider (real demand paging) and the paged baseline
// (16-token blocks) - the tokenizer's streaming detokenizer and the engine.
// The checks are in e2e_support.h.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "e2e_support.h"

namespace vpod::engine::e2e {
namespace {

Env* env = nullptr;
std::string skip_reason;

class EndToEnd : public ::testing::TestWithParam<KvCacheKind> {
 protected:
  static void SetUpTestSuite() {
    env = new Env;
    skip_reason = load_cpu_tiny_env(*env);
  }
  static void TearDownTestSuite() {
    if (!env->dir.empty()) fs::remove_all(env->dir);
    delete env;
    env = nullptr;
  }
  void SetUp() override {
    // A failed load is a failure, missing fixtures a skip.
    if (skip_reason.rfind("loading", 0) == 0) FAIL() << skip_reason;
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
    env->kv_cache = GetParam();
  }
};

TEST_P(EndToEnd, SixtyFourConcurrentRequestsInATightKvBudgetMatchTheirSoloRuns) {
  check_concurrent_requests_match_solo_runs(*env);
}

TEST_P(EndToEnd, AbortMidGenerationFreesTheSlot) { check_abort_frees_the_slot(*env); }

TEST_P(EndToEnd, AStopStringAcrossATokenBoundaryIsHeldBackAndCut) {
  check_stop_string_across_tokens(*env);
}

TEST_P(EndToEnd, PipelinedStreamsEqualTheSynchronousLoop) {
  check_pipelined_streams_equal_synchronous(*env);
}

TEST_P(EndToEnd, PipelinedEqualsSynchronousOnTheSameSchedule) {
  check_pipelined_equals_synchronous_on_the_same_schedule(*env, 12);
}

TEST_P(EndToEnd, PrefixCacheHitsGenerateWhatColdRunsGenerate) {
  check_prefix_hits_match_cold_runs(*env);
}

INSTANTIATE_TEST_SUITE_P(KvCache, EndToEnd,
                         ::testing::Values(KvCacheKind::vattn, KvCacheKind::paged),
                         [](const auto& info) {
                           return std::string(kv_cache_kind_name(info.param));
                         });

// The GPU runs' comparison (Env::exact_solo_match off), on made-up outputs:
// a difference is accepted only where the two tokens are a near tie.
Output made_up(std::vector<std::int32_t> tokens, std::int32_t second, float margin) {
  Output o;
  o.tokens = std::move(tokens);
  for (const std::int32_t t : o.tokens) {
    SampledToken s;
    s.token = t;
    s.logprob = -1.0f;
    s.num_top = 2;
    s.top[0] = {t, -1.0f};
    s.top[1] = {second, -1.0f - margin};
    o.logprobs.push_back(s);
  }
  return o;
}

TEST(NearTieComparison, AcceptsOnlyNearTiesAtTheFirstDifference) {
  Env loose;
  loose.exact_solo_match = false;
  loose.near_tie_nats = 0.25f;
  // Identical.
  EXPECT_TRUE(
      expect_matches_solo(loose, made_up({1, 2, 3}, 9, 0.1f), made_up({1, 2, 3}, 9, 0.1f), 0));
  // Parting at token 1 over a near tie (each run's runner-up is the other's pick).
  Output solo = made_up({1, 2, 3}, 7, 0.1f);
  Output got = made_up({1, 7, 5}, 2, 0.1f);
  got.logprobs[0] = solo.logprobs[0];
  EXPECT_FALSE(expect_matches_solo(loose, got, solo, 0));
  // Parting where the batched run's margin is wide: a failure.
  Output wide = made_up({1, 7, 5}, 2, 3.0f);
  EXPECT_NONFATAL_FAILURE(expect_matches_solo(loose, wide, made_up({1, 2, 3}, 7, 0.1f), 0),
                          "batched run's margin");
  // Parting on a token outside the other run's top list: a failure.
  EXPECT_NONFATAL_FAILURE(
      expect_matches_solo(loose, made_up({1, 8, 5}, 2, 0.1f), made_up({1, 2, 3}, 7, 0.1f), 0),
      "not in each other's top");
  // Exact mode accepts no difference at all.
  Env exact;
  EXPECT_NONFATAL_FAILURE(expect_matches_solo(exact, got, solo, 0), "request 0");
}

}  // namespace
}  // namespace vpod::engine::e2e
