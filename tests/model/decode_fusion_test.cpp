// The model's fused decode orchestration (model.cpp: RMSNorm + residual add
// inside the following GEMM, SiLU*mul inside the gate/up GEMM, the final norm
// and logit-row gather inside the LM head, the residual stream alternating
// between two buffers) gives exactly the logits of the unfused op sequence.
// The CPU backend implements the fused ops by composing its own, so any
// difference here is the orchestration's; the CUDA kernels are compared
// bitwise with the separate kernels in the GPU tests.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kv_buffers.h"
#include "model/model.h"
#include "temp_model_dir.h"

namespace vpod::model {
namespace {

// Prefills 4 sequences, then decodes 4, 3, 2 and 1 of them (2 steps each)
// and runs a 3-token prefill chunk with every token's logits; returns all
// logits of the steps with at most 4 tokens.
std::vector<std::vector<float>> small_steps(Model& m, Backend& backend) {
  auto kv = KvCacheBuffers::create(backend, m.config(), m.kv_dtype(), 5, 64);
  EXPECT_TRUE(kv.ok());
  StepPlan plan;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> tok(0, m.config().vocab_size - 1);
  const int lens[] = {9, 3, 17, 5};
  HybridBatch prefill;
  int offset = 0;
  for (int slot = 0; slot < 4; ++slot) {
    prefill.prefills.push_back(
        {.slot = slot, .cached_len = 0, .num_new = lens[slot], .token_offset = offset});
    for (int i = 0; i < lens[slot]; ++i) {
      prefill.token_ids.push_back(tok(rng));
      prefill.positions.push_back(i);
    }
    offset += lens[slot];
  }
  EXPECT_TRUE(m.forward(prefill, kv->view(), plan).ok());
  int context[] = {lens[0], lens[1], lens[2], lens[3]};
  std::vector<std::vector<float>> out;
  auto keep = [&](const Result<TensorView>& logits) {
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return;
    const auto* p = static_cast<const float*>(logits->data());
    out.emplace_back(p, p + logits->numel());
  };
  for (int active : {4, 3, 2, 1}) {
    for (int step = 0; step < 2; ++step) {
      HybridBatch d;
      for (int slot = 0; slot < active; ++slot) {
        d.decodes.push_back(
            {.slot = slot, .cached_len = context[slot], .num_new = 1, .token_offset = slot});
        d.token_ids.push_back(tok(rng));
        d.positions.push_back(context[slot]);
        ++context[slot];
      }
      keep(m.forward(d, kv->view(), plan));
    }
  }
  HybridBatch chunk;
  chunk.prefills.push_back({.slot = 4, .cached_len = 0, .num_new = 3, .token_offset = 0});
  for (int i = 0; i < 3; ++i) {
    chunk.token_ids.push_back(tok(rng));
    chunk.positions.push_back(i);
  }
  keep(m.forward(chunk, kv->view(), plan, LogitsMode::all_tokens));
  return out;
}

TEST(DecodeFusion, CpuFusedStepsEqualUnfused) {
  for (const char* preset : {"tiny", "tiny-qwen2", "tiny-qwen3"}) {
    const testing::TempModelDir dir(preset, 9);
    ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();
    auto backend = make_cpu_backend(2);
    auto model = Model::load(dir.path(), *backend, {.max_num_tokens = 64, .max_num_sequences = 8});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    Model& m = **model;
    EXPECT_FALSE(backend->decode_tuning().fuse);  // off by default
    EXPECT_FALSE(backend->fused_decode(1, m.config().hidden_size));
    const auto unfused = small_steps(m, *backend);
    ASSERT_EQ(unfused.size(), 9u);
    for (const DecodeTuning& t :
         {DecodeTuning{.fuse = true}, DecodeTuning{.fuse = true, .fuse_logits = false}}) {
      backend->set_decode_tuning(t);
      EXPECT_TRUE(backend->fused_decode(4, m.config().hidden_size));
      EXPECT_FALSE(backend->fused_decode(5, m.config().hidden_size));
      const auto fused = small_steps(m, *backend);
      ASSERT_EQ(fused.size(), unfused.size());
      for (std::size_t i = 0; i < fused.size(); ++i) {
        ASSERT_EQ(fused[i].size(), unfused[i].size());
        EXPECT_EQ(std::memcmp(fused[i].data(), unfused[i].data(), fused[i].size() * sizeof(float)),
                  0)
            << preset << " step " << i << " fuse_logits " << t.fuse_logits;
      }
    }
  }
}

}  // namespace
}  // namespace vpod::model
