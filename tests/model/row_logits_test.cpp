// Prompt logprobs' model side: after a forward in LogitsMode::last_keep_hidden,
// Model::row_logits gives any flattened rows' logits in slices of at most
// max_logit_rows, equal to the rows of an all_tokens forward of the same
// step; the per-sequence logits the step returns are those of
// last_per_sequence; a step too small for the fused decode path keeps its
// hidden states too; rows outside the kept ones are refused.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kv_buffers.h"
#include "model/model.h"
#include "temp_model_dir.h"

namespace vpod::model {
namespace {

std::vector<float> copy_rows(const TensorView& t) {
  const auto* p = static_cast<const float*>(t.data());
  return {p, p + t.numel()};
}

// Two prefill chunks (the second over cached context) and one decode.
HybridBatch hybrid_step(int vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  HybridBatch b;
  b.prefills.push_back({.slot = 0, .cached_len = 0, .num_new = 11, .token_offset = 0});
  b.prefills.push_back({.slot = 1, .cached_len = 0, .num_new = 6, .token_offset = 11});
  for (int i = 0; i < 11; ++i) b.positions.push_back(i);
  for (int i = 0; i < 6; ++i) b.positions.push_back(i);
  for (int i = 0; i < 17; ++i) b.token_ids.push_back(tok(rng));
  return b;
}

TEST(RowLogits, EqualAllTokensLogitsInSlices) {
  const testing::TempModelDir dir("tiny", 21);
  ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();
  auto backend = make_cpu_backend(2);
  // 4 logit rows: the 17 rows come back in 5 slices.
  auto model = Model::load(dir.path(), *backend,
                           {.max_num_tokens = 64, .max_num_sequences = 4, .max_logit_rows = 17});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& m = **model;
  const int vocab = m.config().vocab_size;
  std::mt19937 rng(5);
  const HybridBatch step = hybrid_step(vocab, rng);

  auto kv_all = KvCacheBuffers::create(*backend, m.config(), m.kv_dtype(), 2, 64);
  ASSERT_TRUE(kv_all.ok());
  StepPlan plan;
  auto all = m.forward(step, kv_all->view(), plan, LogitsMode::all_tokens);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  const std::vector<float> want = copy_rows(*all);
  auto last = m.forward(step, kv_all->view(), plan, LogitsMode::last_per_sequence);
  ASSERT_TRUE(last.ok());
  const std::vector<float> want_last = copy_rows(*last);

  auto kv = KvCacheBuffers::create(*backend, m.config(), m.kv_dtype(), 2, 64);
  ASSERT_TRUE(kv.ok());
  auto kept = m.forward(step, kv->view(), plan, LogitsMode::last_keep_hidden);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(copy_rows(*kept), want_last);
  const int slice = 4;
  for (int begin = 0; begin < 17; begin += slice) {
    const int n = std::min(slice, 17 - begin);
    auto rows = m.row_logits(begin, n);
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    ASSERT_EQ(rows->size(0), n);
    const std::vector<float> got = copy_rows(*rows);
    for (int r = 0; r < n; ++r) {
      for (int v = 0; v < vocab; ++v) {
        ASSERT_EQ(got[static_cast<std::size_t>(r) * vocab + v],
                  want[static_cast<std::size_t>(begin + r) * vocab + v])
            << "row " << begin + r << " id " << v;
      }
    }
  }
  EXPECT_FALSE(m.row_logits(16, 2).ok());  // past the step's rows
  EXPECT_FALSE(m.row_logits(-1, 1).ok());
  EXPECT_FALSE(m.row_logits(0, 18).ok());  // more than max_logit_rows
  // A forward that did not keep them: nothing to read.
  ASSERT_TRUE(m.forward(step, kv_all->view(), plan).ok());
  EXPECT_FALSE(m.row_logits(0, 1).ok());
}

// Two tokens: small enough for the fused decode path, which normalizes only
// the logit rows; with kept hidden states the unfused loop runs instead.
TEST(RowLogits, SmallPrefillKeepsItsHiddenStates) {
  const testing::TempModelDir dir("tiny", 22);
  ASSERT_TRUE(dir.status().ok());
  auto backend = make_cpu_backend(2);
  auto model = Model::load(dir.path(), *backend, {.max_num_tokens = 16, .max_num_sequences = 4});
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  HybridBatch b;
  b.prefills.push_back({.slot = 0, .cached_len = 0, .num_new = 2, .token_offset = 0});
  b.token_ids = {5, 9};
  b.positions = {0, 1};
  auto kv = KvCacheBuffers::create(*backend, m.config(), m.kv_dtype(), 1, 16);
  ASSERT_TRUE(kv.ok());
  StepPlan plan;
  auto all = m.forward(b, kv->view(), plan, LogitsMode::all_tokens);
  ASSERT_TRUE(all.ok());
  const std::vector<float> want = copy_rows(all->slice(0, 0, 1));
  ASSERT_TRUE(m.forward(b, kv->view(), plan, LogitsMode::last_keep_hidden).ok());
  auto row = m.row_logits(0, 1);
  ASSERT_TRUE(row.ok()) << row.status().to_string();
  EXPECT_EQ(copy_rows(*row), want);
}

}  // namespace
}  // namespace vpod::model
