// The end-to-end checks of e2e_support.h on the GPU: CUDA backend (bf16,
// cuBLASLt GEMMs and the GEMV kernel, the attention kernels), a 4-layer
// Llama-3 shaped model (test-llama3 preset: hidden 1024, head dim 128, 2 KV
// heads, random weights) and the real tokenizer, in the four modes vpod
// serves: the vAttention cache on CUDA VMM (2 MiB pages) or the paged
// baseline (FlashInfer's kernels over 16-token blocks), each with serial
// attention and through POD (vpod's kernel, or FlashInfer's POD on the paged
// cache). A 2 MiB page holds 1,024 tokens of this model's K (or V), so the
// requests are long enough (about 700-1,500 tokens) to cross page boundaries
// and force preemptions in a budget of a fifth of what they need.
//
// bf16 kernels here depend on the batch (GEMV below 5 rows, cuBLASLt above;
// attention splits by batch shape), so a batched greedy output may part from
// its solo run where two tokens are a near tie; Env::exact_solo_match is off
// and the first difference must be one (e2e_support.h). The engine runs
// pipelined with the model on a worker thread (vpod serve's default) except
// where a test names the synchronous loop.
#include <gtest/gtest.h>

#include <map>

#include "e2e_support.h"
#include "kvcache/cuda_vmm.h"
#include "support/gpu.h"

namespace vpod::engine::e2e {
namespace {

struct ModeEnv {
  std::unique_ptr<Env> env;
  std::string failure;
};

// One loaded model per attention mode, kept until the suite ends.
std::map<model::AttentionMode, ModeEnv>& loaded_envs() {
  static std::map<model::AttentionMode, ModeEnv> envs;
  return envs;
}

ModeEnv& env_for(model::AttentionMode mode) {
  ModeEnv& m = loaded_envs()[mode];
  if (m.env || !m.failure.empty()) return m;
  m.env = std::make_unique<Env>();
  Env& env = *m.env;
  env.max_num_seqs = 32;
  env.max_num_batched_tokens = 2048;
  env.max_ctx = 2048;
  env.min_repeats = 40;
  env.max_repeats = 80;
  env.min_out = 64;
  env.max_out = 256;
  env.exact_solo_match = false;
  env.near_tie_nats = 0.25f;
  env.device = Device::cuda;
  env.make_provider = []() -> Result<std::shared_ptr<kvcache::VmmProvider>> {
    VPOD_ASSIGN_OR_RETURN(auto p, kvcache::CudaVmmProvider::create(0));
    return std::shared_ptr<kvcache::VmmProvider>(std::move(p));
  };
  auto backend = model::make_cuda_backend({.attention_mode = mode});
  if (!backend.ok()) {
    m.failure = backend.status().to_string();
    return m;
  }
  const Status loaded = load_env(env, "test-llama3", std::move(backend).value());
  if (!loaded.ok()) m.failure = loaded.to_string();
  return m;
}

// --kv-cache x --attention. The loaded model depends on the attention mode
// only; the stacks build the KV store the parameter names.
struct ServeMode {
  KvCacheKind kv_cache;
  model::AttentionMode attention;
};

class EndToEndGpu : public ::testing::TestWithParam<ServeMode> {
 protected:
  void SetUp() override {
    VPOD_REQUIRE_GPU();
    ModeEnv& m = env_for(GetParam().attention);
    if (!m.failure.empty()) FAIL() << m.failure;
    env = m.env.get();
    env->kv_cache = GetParam().kv_cache;
  }
  static void TearDownTestSuite() {
    for (auto& [mode, m] : loaded_envs())
      if (m.env && !m.env->dir.empty()) fs::remove_all(m.env->dir);
    loaded_envs().clear();
  }
  Env* env = nullptr;
};

TEST_P(EndToEndGpu, SixtyFourConcurrentRequestsInATightKvBudgetMatchTheirSoloRuns) {
  check_concurrent_requests_match_solo_runs(*env);
}

TEST_P(EndToEndGpu, AbortMidGenerationFreesTheSlot) { check_abort_frees_the_slot(*env); }

TEST_P(EndToEndGpu, AStopStringAcrossATokenBoundaryIsHeldBackAndCut) {
  check_stop_string_across_tokens(*env);
}

// The pipelined loop (worker thread, the default) against the synchronous
// one on the same schedule: identical streams, or parting only at a near tie
// (see e2e_support.h); and the abort check in the synchronous loop too.
TEST_P(EndToEndGpu, PipelinedEqualsSynchronousOnTheSameSchedule) {
  check_pipelined_equals_synchronous_on_the_same_schedule(*env, 16);
}

TEST_P(EndToEndGpu, AbortMidGenerationFreesTheSlotSynchronous) {
  check_abort_frees_the_slot(*env, {.async = false, .worker = false});
}

TEST_P(EndToEndGpu, PrefixCacheHitsGenerateWhatColdRunsGenerate) {
  check_prefix_hits_match_cold_runs(*env);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, EndToEndGpu,
    ::testing::Values(ServeMode{KvCacheKind::vattn, model::AttentionMode::serial},
                      ServeMode{KvCacheKind::vattn, model::AttentionMode::pod},
                      ServeMode{KvCacheKind::paged, model::AttentionMode::serial},
                      ServeMode{KvCacheKind::paged, model::AttentionMode::pod}),
    [](const auto& info) {
      return std::string(kv_cache_kind_name(info.param.kv_cache)) + "_" +
             std::string(attention::attention_mode_name(info.param.attention));
    });

}  // namespace
}  // namespace vpod::engine::e2e
