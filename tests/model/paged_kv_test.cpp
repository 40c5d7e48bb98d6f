// The model over the paged baseline cache (block tables) gives exactly the
// logits of the contiguous cache on the CPU backend: same fp32 math, only
// the K/V addresses differ.
#include <gtest/gtest.h>

#include <cstring>

#include "kv_buffers.h"
#include "model/model.h"
#include "paged_support.h"
#include "temp_model_dir.h"

namespace vpod::model {
namespace {

TEST(PagedKv, CpuForwardMatchesContiguousCache) {
  const testing::TempModelDir dir("tiny", 4);
  ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();
  auto backend = make_cpu_backend(2);
  auto model = Model::load(dir.path(), *backend, {.max_num_tokens = 256, .max_num_sequences = 8});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& m = **model;
  auto contiguous = KvCacheBuffers::create(*backend, m.config(), m.kv_dtype(), 4, 128);
  ASSERT_TRUE(contiguous.ok());
  testing::PagedKv paged = testing::make_paged_kv(
      *backend, m.config(), 4, 128, 16,
      [](void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); });
  int step_index = 0;
  StepPlan plan, paged_plan;
  for (const HybridBatch& b : testing::paged_scenario(m.config().vocab_size)) {
    auto want = m.forward(b, contiguous->view(), plan);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    const std::vector<float> want_host(static_cast<const float*>(want->data()),
                                       static_cast<const float*>(want->data()) + want->numel());
    auto got = m.forward(b, KvCacheView{.contiguous = {}, .paged = paged.views}, paged_plan);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->numel(), static_cast<std::int64_t>(want_host.size()));
    EXPECT_EQ(std::memcmp(got->data(), want_host.data(), want_host.size() * sizeof(float)), 0)
        << "step " << step_index;
    ++step_index;
  }
  // The K/V rows sit where the table says: (slot 2, token 40) of the last
  // layer, in both caches.
  const int layer = m.config().num_layers - 1;
  const KvLayerView& cv = contiguous->views()[layer];
  const PagedKvView& pv = paged.views[layer];
  const int slot = 2, token = 40;
  const std::int64_t block =
      paged.table[static_cast<std::size_t>(slot * pv.max_blocks_per_slot + token / pv.block_size)];
  const auto* want_k =
      static_cast<const float*>(cv.k) + slot * cv.slot_stride + token * cv.token_stride;
  const auto* got_k = static_cast<const float*>(pv.k) + block * pv.block_stride +
                      (token % pv.block_size) * pv.token_stride;
  const auto* got_v = static_cast<const float*>(pv.v) + block * pv.block_stride +
                      (token % pv.block_size) * pv.token_stride;
  const auto* want_v =
      static_cast<const float*>(cv.v) + slot * cv.slot_stride + token * cv.token_stride;
  const std::size_t row = static_cast<std::size_t>(cv.num_kv_heads) * cv.head_dim;
  EXPECT_EQ(std::memcmp(got_k, want_k, row * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(got_v, want_v, row * sizeof(float)), 0);
  EXPECT_NE(want_k[0], 0.0f);  // written at all

  // A table too short for the context is rejected before any op runs.
  std::vector<PagedKvView> short_views = paged.views;
  for (auto& v : short_views) v.max_blocks_per_slot = 2;  // 32 tokens per slot
  const auto steps = testing::paged_scenario(m.config().vocab_size);
  EXPECT_FALSE(
      m.forward(steps[0], KvCacheView{.contiguous = {}, .paged = short_views}, paged_plan).ok());
}

}  // namespace
}  // namespace vpod::model
