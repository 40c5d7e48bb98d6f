// End to end on the CPU backend: the tiny Llama-3 model (random weights from
// make-model, the real Llama-3 tokenizer), the vAttention KV cache on the
// host VMM provider (real demand paging), the tokenizer's streaming
// detokenizer and the engine. The checks are in e2e_support.h.
#include <gtest/gtest.h>

#include "e2e_support.h"
#include "kvcache/host_vmm.h"

namespace vpod::engine::e2e {
namespace {

// 4 KiB pages (the OS page) hold 16 tokens of the tiny model's fp32 K (or V).
constexpr std::size_t kHostPageBytes = 4096;

Env* env = nullptr;
std::string skip_reason;

class EndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env = new Env;
    if (model::find_fixtures_dir().empty()) {
      skip_reason = "no tokenizer fixtures (set VPOD_FIXTURES)";
      return;
    }
    env->make_provider = []() -> Result<std::shared_ptr<kvcache::VmmProvider>> {
      VPOD_ASSIGN_OR_RETURN(auto p, kvcache::HostVmmProvider::create(kHostPageBytes));
      return std::shared_ptr<kvcache::VmmProvider>(std::move(p));
    };
    const Status loaded = load_env(*env, "tiny", model::make_cpu_backend(2));
    if (!loaded.ok()) skip_reason = "loading the tiny model failed: " + loaded.to_string();
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
  }
};

TEST_F(EndToEnd, SixtyFourConcurrentRequestsInATightKvBudgetMatchTheirSoloRuns) {
  check_concurrent_requests_match_solo_runs(*env);
}

TEST_F(EndToEnd, AbortMidGenerationFreesTheSlot) { check_abort_frees_the_slot(*env); }

TEST_F(EndToEnd, AStopStringAcrossATokenBoundaryIsHeldBackAndCut) {
  check_stop_string_across_tokens(*env);
}

}  // namespace
}  // namespace vpod::engine::e2e
