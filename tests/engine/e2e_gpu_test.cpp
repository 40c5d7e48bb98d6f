// The end-to-end checks of e2e_support.h on the GPU: CUDA backend (bf16,
// cuBLASLt GEMMs, the attention kernels), the vAttention cache on CUDA VMM
// (2 MiB pages), a 4-layer Llama-3 shaped model (test-llama3 preset: hidden
// 1024, head dim 128, 2 KV heads, random weights) and the real tokenizer.
// A 2 MiB page holds 1,024 tokens of this model's K (or V), so the requests
// are long enough (about 700-1,500 tokens) to cross page boundaries and force
// preemptions in a budget of a fifth of what they need.
#include <gtest/gtest.h>

#include "e2e_support.h"
#include "kvcache/cuda_vmm.h"
#include "support/gpu.h"

namespace vpod::engine::e2e {
namespace {

Env* env = nullptr;
std::string failure;

class EndToEndGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env = new Env;
    env->max_num_seqs = 32;
    env->max_num_batched_tokens = 2048;
    env->max_ctx = 2048;
    env->min_repeats = 40;
    env->max_repeats = 80;
    env->min_out = 64;
    env->max_out = 256;
    env->make_provider = []() -> Result<std::shared_ptr<kvcache::VmmProvider>> {
      VPOD_ASSIGN_OR_RETURN(auto p, kvcache::CudaVmmProvider::create(0));
      return std::shared_ptr<kvcache::VmmProvider>(std::move(p));
    };
  }
  static void TearDownTestSuite() {
    if (!env->dir.empty()) fs::remove_all(env->dir);
    delete env;
    env = nullptr;
  }
  void SetUp() override {
    VPOD_REQUIRE_GPU();
    if (!env->model && failure.empty()) {
      auto backend = model::make_cuda_backend({});
      if (!backend.ok()) {
        failure = backend.status().to_string();
      } else {
        const Status loaded = load_env(*env, "test-llama3", std::move(backend).value());
        if (!loaded.ok()) failure = loaded.to_string();
      }
    }
    if (!failure.empty()) FAIL() << failure;
  }
};

TEST_F(EndToEndGpu, SixtyFourConcurrentRequestsInATightKvBudgetMatchTheirSoloRuns) {
  check_concurrent_requests_match_solo_runs(*env);
}

TEST_F(EndToEndGpu, AbortMidGenerationFreesTheSlot) { check_abort_frees_the_slot(*env); }

TEST_F(EndToEndGpu, AStopStringAcrossATokenBoundaryIsHeldBackAndCut) {
  check_stop_string_across_tokens(*env);
}

}  // namespace
}  // namespace vpod::engine::e2e
