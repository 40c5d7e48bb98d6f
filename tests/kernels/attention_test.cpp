// CPU tests of the attention planner, the launchers' input validation and the
// CPU references (no GPU needed; the kernels themselves are tested in
// attention_gpu_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_reference.h"
#include "kernels/attention/attention_validate.h"
#include "kernels/attention/kv_tensor_map.h"
#include "kernels/attention_test_util.h"

namespace vpod::attention {
namespace {

using testing::HostKvCache;
using testing::KvLayout;
using testing::make_batch;

constexpr int kH200Sms = 132;

AttentionDims llama_dims(DType dtype = DType::f16) { return {32, 8, 128, dtype}; }

PlanOptions h200() { return PlanOptions{kH200Sms, 0, 0}; }

// ---------------------------------------------------------------------------
// Planner
// ---------------------------------------------------------------------------

TEST(AttentionPlanTest, RejectsUnsupportedDims) {
  const HybridBatch batch = make_batch({{0, 4}}, {});
  EXPECT_EQ(AttentionPlan::create(batch, {32, 8, 96, DType::f16}, h200()).status().code(),
            StatusCode::unimplemented);
  EXPECT_EQ(AttentionPlan::create(batch, {32, 8, 128, DType::f32}, h200()).status().code(),
            StatusCode::unimplemented);
  EXPECT_EQ(AttentionPlan::create(batch, {6, 4, 128, DType::f16}, h200()).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(AttentionPlan::create(batch, {0, 0, 128, DType::f16}, h200()).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(AttentionPlan::create(batch, llama_dims(), PlanOptions{0, 0, 0}).status().code(),
            StatusCode::invalid_argument);
}

TEST(AttentionPlanTest, RejectsInconsistentBatches) {
  HybridBatch gap = make_batch({{0, 4}}, {10});
  gap.decodes[0].token_offset = 5;
  EXPECT_EQ(AttentionPlan::create(gap, llama_dims(), h200()).status().code(),
            StatusCode::invalid_argument);
  HybridBatch long_decode = make_batch({}, {10});
  long_decode.decodes[0].num_new = 2;
  EXPECT_EQ(AttentionPlan::create(long_decode, llama_dims(), h200()).status().code(),
            StatusCode::invalid_argument);
  HybridBatch negative = make_batch({{0, 4}}, {});
  negative.prefills[0].cached_len = -1;
  EXPECT_EQ(AttentionPlan::create(negative, llama_dims(), h200()).status().code(),
            StatusCode::invalid_argument);
  HybridBatch empty_chunk = make_batch({{3, 0}}, {});
  EXPECT_EQ(AttentionPlan::create(empty_chunk, llama_dims(), h200()).status().code(),
            StatusCode::invalid_argument);
}

// Every (row, key) pair a causal row needs is covered by exactly one work
// item; split tiles have one combine per row and disjoint partial rows.
void expect_plan_covers_batch(const AttentionPlan& plan, const HybridBatch& batch) {
  const int heads = plan.dims().num_q_heads;
  std::set<int> partial_rows_used;
  std::map<std::pair<int, int>, std::vector<const PrefillWorkItem*>> by_tile;
  for (const PrefillWorkItem& item : plan.prefill_items()) {
    by_tile[{item.seq, item.q_begin}].push_back(&item);
    EXPECT_EQ(item.kv_begin % kPrefillBlockN, 0);
    EXPECT_LT(item.kv_begin, item.kv_end);
  }
  std::map<int, const CombineItem*> combines;
  for (const CombineItem& c : plan.prefill_combines()) {
    EXPECT_TRUE(combines.emplace(c.token, &c).second) << "two combines for row " << c.token;
  }
  for (int i = 0; i < static_cast<int>(batch.prefills.size()); ++i) {
    const BatchSequence& s = batch.prefills[i];
    for (int q = 0; q < s.num_new; q += kPrefillBlockM) {
      const int rows = std::min(kPrefillBlockM, s.num_new - q);
      auto it = by_tile.find({i, q});
      ASSERT_NE(it, by_tile.end()) << "no item for prefill " << i << " rows from " << q;
      std::vector<const PrefillWorkItem*> items = it->second;
      std::sort(items.begin(), items.end(),
                [](auto* a, auto* b) { return a->kv_begin < b->kv_begin; });
      int expected_begin = 0;
      for (const PrefillWorkItem* item : items) {
        EXPECT_EQ(item->kv_begin, expected_begin);
        expected_begin = item->kv_end;
        EXPECT_EQ(item->num_splits, static_cast<int>(items.size()));
        if (items.size() > 1) {
          for (int r = 0; r < rows; ++r) {
            EXPECT_TRUE(partial_rows_used.insert(item->partial_row + r).second);
          }
        } else {
          EXPECT_EQ(item->partial_row, -1);
        }
      }
      EXPECT_EQ(expected_begin, s.cached_len + q + rows) << "keys of the tile's last row";
      for (int r = 0; r < rows; ++r) {
        const bool split = items.size() > 1;
        EXPECT_EQ(combines.count(s.token_offset + q + r), split ? 1u : 0u);
        if (split) {
          const CombineItem* c = combines.at(s.token_offset + q + r);
          EXPECT_EQ(c->num_splits, static_cast<int>(items.size()));
          for (const PrefillWorkItem* item : items) {
            EXPECT_EQ(c->partial_row + item->split * c->partial_stride, item->partial_row + r);
          }
        }
      }
    }
  }
  std::map<int, std::vector<const DecodeWorkItem*>> by_decode;
  for (const DecodeWorkItem& item : plan.decode_items()) by_decode[item.seq].push_back(&item);
  std::map<int, const CombineItem*> decode_combines;
  for (const CombineItem& c : plan.decode_combines()) decode_combines[c.token] = &c;
  for (int i = 0; i < static_cast<int>(batch.decodes.size()); ++i) {
    std::vector<const DecodeWorkItem*> items = by_decode[i];
    ASSERT_FALSE(items.empty());
    std::sort(items.begin(), items.end(),
              [](auto* a, auto* b) { return a->kv_begin < b->kv_begin; });
    int expected_begin = 0;
    for (const DecodeWorkItem* item : items) {
      EXPECT_EQ(item->slot, batch.decodes[i].slot);
      EXPECT_EQ(item->token_offset, batch.decodes[i].token_offset);
      EXPECT_EQ(item->kv_begin, expected_begin);
      EXPECT_EQ(item->kv_begin % kDecodeBlockN, 0);
      expected_begin = item->kv_end;
      if (items.size() > 1) {
        EXPECT_TRUE(partial_rows_used.insert(item->partial_row).second);
        // The split names its combine (the fused merge in the decode kernel
        // finds its group's rows through it).
        ASSERT_GE(item->combine, 0);
        ASSERT_LT(item->combine, static_cast<int>(plan.decode_combines().size()));
        const CombineItem& c = plan.decode_combines()[item->combine];
        EXPECT_EQ(c.token, batch.decodes[i].token_offset);
        EXPECT_EQ(c.num_splits, static_cast<int>(items.size()));
        EXPECT_EQ(c.partial_row +
                      (item->kv_begin / (items[0]->kv_end - items[0]->kv_begin)) * c.partial_stride,
                  item->partial_row);
      } else {
        EXPECT_EQ(item->partial_row, -1);
        EXPECT_EQ(item->combine, -1);
      }
    }
    EXPECT_EQ(expected_begin, batch.decodes[i].context_len());
    EXPECT_EQ(decode_combines.count(batch.decodes[i].token_offset), items.size() > 1 ? 1u : 0u);
  }
  for (int row : partial_rows_used) {
    EXPECT_GE(row, 0);
    EXPECT_LT(row, plan.partial_rows());
  }
  EXPECT_EQ(static_cast<int>(partial_rows_used.size()), plan.partial_rows());
  EXPECT_EQ(plan.workspace_bytes() > 0, plan.partial_rows() > 0 || heads == 0);
  EXPECT_EQ(plan.decode_counter_count(),
            plan.decode_combines().size() * plan.dims().num_kv_heads * plan.decode_head_chunks());
}

TEST(AttentionPlanTest, CoversRandomBatchesExactlyOnce) {
  std::mt19937_64 rng(42);
  int packed_trials = 0, mixed_trials = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<testing::SeqSpec> prefills;
    std::vector<int> decodes;
    const int num_prefills = std::uniform_int_distribution<int>(0, 3)(rng);
    const int num_decodes = std::uniform_int_distribution<int>(0, 40)(rng);
    // Every fourth trial short chunks only (conversation turns), where the
    // group may be packed; every other fourth short chunks beside long ones.
    for (int i = 0; i < num_prefills; ++i) {
      const int max_new = trial % 4 == 3 || (trial % 4 == 1 && i % 2 == 1) ? 40 : 3000;
      prefills.push_back({std::uniform_int_distribution<int>(0, 20000)(rng),
                          std::uniform_int_distribution<int>(1, max_new)(rng)});
    }
    for (int i = 0; i < num_decodes; ++i) {
      decodes.push_back(std::uniform_int_distribution<int>(1, 20000)(rng));
    }
    const HybridBatch batch = make_batch(prefills, decodes);
    PlanOptions options = h200();
    if (trial % 3 == 1) options = {kH200Sms, 3, 5};
    if (trial % 3 == 2) options = {8, 0, 0};
    const AttentionDims dims{trial % 2 ? 28 : 32, trial % 2 ? 4 : 8, trial % 4 < 2 ? 128 : 64,
                             DType::f16};
    auto plan = AttentionPlan::create(batch, dims, options);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    expect_plan_covers_batch(*plan, batch);
    // Longest items first.
    for (std::size_t i = 1; i < plan->prefill_items().size(); ++i) {
      EXPECT_GE(plan->prefill_items()[i - 1].cost, plan->prefill_items()[i].cost);
    }
    // GQA packing exactly for the items whose tokens fit a tile for the
    // whole group, where the step's walk packs; prefill_pack() when every
    // item does. The warp-specialized walk gives each item its tiles in list
    // order.
    const bool walk_packs = gqa_packable_tiles_pack(
        [&](auto&& f) {
          for (const BatchSequence& s : batch.prefills) {
            for (int q = 0; q < s.num_new; q += kPrefillBlockM) {
              const int rows = std::min(kPrefillBlockM, s.num_new - q);
              f(rows, (s.cached_len + q + rows + kPrefillBlockN - 1) / kPrefillBlockN);
            }
          }
        },
        dims.num_q_heads, dims.num_kv_heads);
    int packed = 0, next_tile = 0;
    for (const PrefillWorkItem& item : plan->prefill_items()) {
      const int rows = std::min(kPrefillBlockM, batch.prefills[item.seq].num_new - item.q_begin);
      const bool packs =
          walk_packs && dims.group_size() > 1 && rows * dims.group_size() <= kPrefillBlockM;
      EXPECT_EQ(item.pack, packs ? dims.group_size() : 1) << "trial " << trial;
      EXPECT_EQ(item.ws_tile, next_tile) << "trial " << trial;
      next_tile += packs ? dims.num_kv_heads : dims.num_q_heads;
      packed += packs ? 1 : 0;
    }
    const int items = static_cast<int>(plan->prefill_items().size());
    EXPECT_EQ(plan->prefill_packed_items(), packed) << "trial " << trial;
    EXPECT_EQ(plan->ws_tiles(), next_tile) << "trial " << trial;
    EXPECT_EQ(plan->prefill_pack(), items > 0 && packed == items ? dims.group_size() : 1)
        << "trial " << trial;
    EXPECT_EQ(plan->prefill_pack_mixed(), packed > 0 && packed < items) << "trial " << trial;
    // A uniform walk's tile count is the same (the launcher takes ws_tiles()).
    if (!plan->prefill_pack_mixed()) {
      EXPECT_EQ(plan->ws_tiles(),
                items * (plan->prefill_pack() > 1 ? dims.num_kv_heads : dims.num_q_heads))
          << "trial " << trial;
    }
    packed_trials += items > 0 && packed == items;
    mixed_trials += packed > 0 && packed < items;
  }
  EXPECT_GT(packed_trials, 0) << "no trial exercised packing";
  EXPECT_GT(mixed_trials, 0) << "no trial mixed packed and one-head tiles";
}

TEST(AttentionPlanTest, SplitsShortChunksOnLongContexts) {
  // 512 new tokens on a 16K context: 4 tiles x 32 heads cannot fill 264 slots.
  auto short_chunk = AttentionPlan::create(make_batch({{16384, 512}}, {}), llama_dims(), h200());
  ASSERT_TRUE(short_chunk.ok());
  EXPECT_GT(short_chunk->prefill_items().size(), 4u);
  EXPECT_EQ(short_chunk->prefill_combines().size(), 512u);
  // 1024 new tokens on an 8K context: 8 tiles x 32 heads = 256 CTAs nearly
  // fill the 264 slots; splitting would double the waves.
  auto full_wave = AttentionPlan::create(make_batch({{7168, 1024}}, {}), llama_dims(), h200());
  ASSERT_TRUE(full_wave.ok());
  EXPECT_EQ(full_wave->prefill_items().size(), 8u);
  // One 128-row tile on a 16K context: 32 CTAs, split about 8 ways.
  auto one_tile = AttentionPlan::create(make_batch({{16384, 128}}, {}), llama_dims(), h200());
  ASSERT_TRUE(one_tile.ok());
  EXPECT_GE(one_tile->prefill_items().size(), 6u);
  EXPECT_LE(one_tile->prefill_items().size(), 17u);
  // A 16K prompt from scratch has 128 tiles x 32 heads: no split.
  auto long_prompt = AttentionPlan::create(make_batch({{0, 16384}}, {}), llama_dims(), h200());
  ASSERT_TRUE(long_prompt.ok());
  EXPECT_EQ(long_prompt->prefill_items().size(), 128u);
  EXPECT_TRUE(long_prompt->prefill_combines().empty());
  EXPECT_EQ(long_prompt->workspace_bytes(), 0u);
}

// On the warp-specialized kernel (one persistent CTA per SM: 132 slots, not
// the tile kernels' 264) the planner picks, for short chunks over long
// contexts, a split count that ran fastest on the H200 (forced 1/2/3/4/8
// splits, fp16, 2026-12-04; docs/attention.md, *KV splits on the
// warp-specialized kernel*). `fastest`: the counts within ~3% of the best.
TEST(AttentionPlanTest, SplitsForTheWarpSpecializedKernelAsMeasured) {
  PlanOptions ws = h200();
  ws.ws_prefill_ctas_per_sm = 1;
  struct Case {
    const char* name;
    std::vector<testing::SeqSpec> prefills;  // {cached_len, num_new}
    std::vector<int> fastest;
  };
  auto seqs = [](int n, testing::SeqSpec s) { return std::vector<testing::SeqSpec>(n, s); };
  const Case cases[] = {
      {"chunk 1024 @8192", {{7168, 1024}}, {1}},
      {"chunk 2048 @16384", {{14336, 2048}}, {1}},
      {"1x512 @15872 (128 CTAs)", {{15872, 512}}, {1}},
      {"1x256 @16128", {{16128, 256}}, {2, 4}},
      {"1x128 @16256 (one tile)", {{16256, 128}}, {4}},
      {"1x384 @8192 (96 CTAs)", {{8192, 384}}, {1}},
      {"1x640 @15744 (160 CTAs: two rounds whole)", {{15744, 640}}, {3, 4}},
      {"1x768 @7424", {{7424, 768}}, {2}},
      {"2x256 @8192", seqs(2, {8192, 256}), {1}},
      {"4x32 @16384 (packed)", seqs(4, {16384, 32}), {4}},
      {"16x16 @8192 (packed)", seqs(16, {8192, 16}), {1}},
      {"1x1024 @31744", {{31744, 1024}}, {1}},
      // Two to four waves stay whole (forced 2 ran 5-7% slower on these).
      {"1x1280 @6912 (320 CTAs)", {{6912, 1280}}, {1}},
      {"1x1792 @14592 (448 CTAs)", {{14592, 1792}}, {1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto plan = AttentionPlan::create(make_batch(c.prefills, {}), llama_dims(), ws);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    const int splits = plan->prefill_items().front().num_splits;
    for (const PrefillWorkItem& item : plan->prefill_items()) EXPECT_EQ(item.num_splits, splits);
    EXPECT_NE(std::find(c.fastest.begin(), c.fastest.end(), splits), c.fastest.end())
        << "splits " << splits;
  }
  // The tile kernels keep their own slots: 4 tiles x 32 heads on 264 split.
  auto tile = AttentionPlan::create(make_batch({{15872, 512}}, {}), llama_dims(), h200());
  ASSERT_TRUE(tile.ok());
  EXPECT_EQ(tile->prefill_items().front().num_splits, 2);
  // So does a plan whose options turn the warp-specialized kernel off.
  PlanOptions off = ws;
  off.kernels.ws_prefill = false;
  auto ws_off = AttentionPlan::create(make_batch({{15872, 512}}, {}), llama_dims(), off);
  ASSERT_TRUE(ws_off.ok());
  EXPECT_EQ(ws_off->prefill_items().front().num_splits, 2);
}

// The warp-specialized kernel's tile order follows the items' costs: alike
// (a chunk over a long context, within 20%) walks head-major, a causal
// prompt's 1..n-block tiles item-major; no prefill, no claim.
TEST(AttentionPlanTest, PrefillItemsCostAlikeOnlyForChunksOverLongContexts) {
  auto plan = [](const HybridBatch& b) {
    return AttentionPlan::create(b, llama_dims(), h200()).value();
  };
  EXPECT_TRUE(plan(make_batch({{14336, 2048}}, {})).prefill_items_cost_alike());
  EXPECT_TRUE(plan(make_batch({{7168, 1024}}, {})).prefill_items_cost_alike());
  EXPECT_FALSE(plan(make_batch({{0, 16384}}, {})).prefill_items_cost_alike());
  EXPECT_FALSE(plan(make_batch({{0, 4096}}, {})).prefill_items_cost_alike());
  // A short chunk beside a long one: unlike.
  EXPECT_FALSE(plan(make_batch({{14336, 2048}, {0, 300}}, {})).prefill_items_cost_alike());
  EXPECT_FALSE(plan(make_batch({}, {4096, 4096})).prefill_items_cost_alike());
}

TEST(AttentionPlanTest, SplitsDecodesOnlyToFillTheGpu) {
  PlanOptions tile = h200();
  tile.decode_kernel = DecodeKernel::tile;
  // 64 x 8K: 512 CTAs already fill 264 slots twice; no split.
  auto big = AttentionPlan::create(make_batch({}, std::vector<int>(64, 8192)), llama_dims(), tile);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->decode_kernel(), DecodeKernel::tile);
  EXPECT_EQ(big->decode_ctas_per_item(), 8);
  EXPECT_EQ(big->decode_items().size(), 64u);
  // 16 x 16K: 128 CTAs leave half the slots idle; split.
  auto few = AttentionPlan::create(make_batch({}, std::vector<int>(16, 16384)), llama_dims(), tile);
  ASSERT_TRUE(few.ok());
  EXPECT_GE(few->decode_items().size(), 32u);
  EXPECT_EQ(few->decode_combines().size(), 16u);
  // The heads kernel has 4 KV heads per CTA (2 CTAs per decode here), so the
  // same batches split until ~one wave of 264 CTAs: 64 x 8K in 2, 16 x 16K in 8.
  PlanOptions heads = h200();
  heads.decode_kernel = DecodeKernel::heads;
  auto big_heads =
      AttentionPlan::create(make_batch({}, std::vector<int>(64, 8192)), llama_dims(), heads);
  ASSERT_TRUE(big_heads.ok());
  EXPECT_EQ(big_heads->decode_kernel(), DecodeKernel::heads);
  EXPECT_EQ(big_heads->decode_ctas_per_item(), 2);
  EXPECT_EQ(big_heads->decode_items().size(), 128u);
  auto few_heads =
      AttentionPlan::create(make_batch({}, std::vector<int>(16, 16384)), llama_dims(), heads);
  ASSERT_TRUE(few_heads.ok());
  EXPECT_EQ(few_heads->decode_items().size(), 128u);
  // One arrival counter per (decode, KV head): the heads kernel's warps count alone.
  EXPECT_EQ(few_heads->decode_counter_count(), 16u * 8u);
  // Forced splits are honoured (and clipped to the context).
  auto forced = AttentionPlan::create(make_batch({}, {1000, 17}), llama_dims(), {kH200Sms, 0, 4});
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->decode_items().size(), 4u + 1u);
  // GQA groups above 16 use several head chunks.
  auto wide = AttentionPlan::create(make_batch({}, {100}), {64, 2, 128, DType::bf16}, h200());
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->decode_head_chunks(), 2);
}

TEST(AttentionPlanTest, PicksTheDecodeKernelPerBatch) {
  auto plan_for = [](int batch, int context) {
    return AttentionPlan::create(make_batch({}, std::vector<int>(batch, context)), llama_dims(),
                                 h200())
        .value();
  };
  // Tile grid beyond one wave (512 / 1024 CTAs on 264 slots), heads grid
  // within one (2 splits -> 256, unsplit -> 256): heads.
  const AttentionPlan big = plan_for(64, 8192);
  EXPECT_EQ(big.decode_kernel(), DecodeKernel::heads);
  EXPECT_EQ(big.decode_items().size(), 128u);
  const AttentionPlan wide = plan_for(128, 4096);
  EXPECT_EQ(wide.decode_kernel(), DecodeKernel::heads);
  EXPECT_EQ(wide.decode_items().size(), 128u);
  EXPECT_TRUE(wide.decode_combines().empty());
  // Heads would need two waves too (512 CTAs): tile.
  EXPECT_EQ(plan_for(256, 2048).decode_kernel(), DecodeKernel::tile);
  // The tile grid fits one wave unsplit: tile.
  EXPECT_EQ(plan_for(32, 4096).decode_kernel(), DecodeKernel::tile);
  // 16 x 16K: the tile kernel would split 128 units in 2 (256 CTAs); unsplit
  // they fit one deep CTA per SM: the deep kernel (see PicksTheDeepKernel...).
  const AttentionPlan few = plan_for(16, 16384);
  EXPECT_EQ(few.decode_kernel(), DecodeKernel::tile_deep);
  EXPECT_EQ(few.decode_items().size(), 16u);
  // Forced splits and explicit kernels are kept as asked.
  PlanOptions forced = h200();
  forced.decode_splits = 2;
  EXPECT_EQ(AttentionPlan::create(make_batch({}, std::vector<int>(128, 4096)), llama_dims(), forced)
                ->decode_kernel(),
            DecodeKernel::tile);
  PlanOptions tile = h200();
  tile.decode_kernel = DecodeKernel::tile;
  EXPECT_EQ(AttentionPlan::create(make_batch({}, std::vector<int>(128, 4096)), llama_dims(), tile)
                ->decode_kernel(),
            DecodeKernel::tile);
}

// Decode splits merge as thread-block clusters when every decode has the same
// number (2..8) of splits (either kernel); the items are then grouped per decode
// (split j of the i-th decode at S * i + j), longest decodes first.
TEST(AttentionPlanTest, MergesEvenDecodeSplitsAsClusters) {
  auto expect_grouped = [](const AttentionPlan& plan, const HybridBatch& batch) {
    const int s = plan.decode_cluster_size();
    ASSERT_GT(s, 0);
    const auto& items = plan.decode_items();
    ASSERT_EQ(items.size(), batch.decodes.size() * s);
    int previous_context = 1 << 30;
    for (std::size_t i = 0; i < batch.decodes.size(); ++i) {
      const DecodeWorkItem& first = items[i * s];
      const int context = batch.decodes[first.seq].context_len();
      EXPECT_LE(context, previous_context) << "longest decodes first";
      previous_context = context;
      for (int j = 0; j < s; ++j) {
        const DecodeWorkItem& item = items[i * s + j];
        EXPECT_EQ(item.seq, first.seq);
        EXPECT_EQ(item.combine, first.combine);
        EXPECT_EQ(item.kv_begin, j == 0 ? 0 : items[i * s + j - 1].kv_end) << "split order";
        EXPECT_LT(item.kv_begin, item.kv_end) << "no empty split";
      }
      EXPECT_EQ(items[i * s + s - 1].kv_end, context);
    }
  };
  // 16 x 16K on the tile kernel (the automatic plan runs it unsplit on the
  // deep kernel): 128 tile CTAs split in 2 -> clusters of 2.
  PlanOptions tile = h200();
  tile.decode_kernel = DecodeKernel::tile;
  const HybridBatch few = make_batch({}, std::vector<int>(16, 16384));
  const AttentionPlan few_plan = AttentionPlan::create(few, llama_dims(), tile).value();
  EXPECT_EQ(few_plan.decode_kernel(), DecodeKernel::tile);
  EXPECT_EQ(few_plan.decode_cluster_size(), 2);
  expect_grouped(few_plan, few);
  expect_plan_covers_batch(few_plan, few);
  // Forced even splits, odd lengths, several lengths with the same split count.
  const HybridBatch even = make_batch({}, {4095, 5000, 4097, 5000});
  PlanOptions three = h200();
  three.decode_splits = 3;
  const AttentionPlan even_plan = AttentionPlan::create(even, llama_dims(), three).value();
  EXPECT_EQ(even_plan.decode_cluster_size(), 3);
  expect_grouped(even_plan, even);
  expect_plan_covers_batch(even_plan, even);
  PlanOptions eight = h200();
  eight.decode_splits = 8;
  const HybridBatch odd = make_batch({}, {16385, 16385, 16385});
  const AttentionPlan eight_plan = AttentionPlan::create(odd, llama_dims(), eight).value();
  EXPECT_EQ(eight_plan.decode_cluster_size(), 8);
  expect_grouped(eight_plan, odd);
  // The heads kernel too: 64 x 8K runs on it, split in 2.
  const HybridBatch big = make_batch({}, std::vector<int>(64, 8192));
  const AttentionPlan big_plan = AttentionPlan::create(big, llama_dims(), h200()).value();
  EXPECT_EQ(big_plan.decode_kernel(), DecodeKernel::heads);
  EXPECT_EQ(big_plan.decode_cluster_size(), 2);
  expect_grouped(big_plan, big);
  expect_plan_covers_batch(big_plan, big);
  // Not as clusters: unsplit (32 x 4K), more than 8 splits, split counts that
  // differ, or the option turned off.
  EXPECT_EQ(AttentionPlan::create(make_batch({}, std::vector<int>(32, 4096)), llama_dims(), h200())
                ->decode_cluster_size(),
            0);
  PlanOptions nine = h200();
  nine.decode_splits = 9;
  EXPECT_EQ(AttentionPlan::create(odd, llama_dims(), nine)->decode_cluster_size(), 0);
  const AttentionPlan mixed =
      AttentionPlan::create(make_batch({}, {16384, 1000}), llama_dims(), {kH200Sms, 0, 4}).value();
  EXPECT_EQ(mixed.decode_items().size(), 5u);
  EXPECT_EQ(mixed.decode_cluster_size(), 0);
  PlanOptions off = tile;
  off.decode_cluster_merge = false;
  const AttentionPlan counters = AttentionPlan::create(few, llama_dims(), off).value();
  EXPECT_EQ(counters.decode_cluster_size(), 0);
  EXPECT_EQ(counters.decode_items().size(), few_plan.decode_items().size());
  PlanOptions heads = eight;
  heads.decode_kernel = DecodeKernel::heads;
  EXPECT_EQ(AttentionPlan::create(odd, llama_dims(), heads)->decode_cluster_size(), 8);
  heads.decode_splits = 9;
  EXPECT_EQ(AttentionPlan::create(odd, llama_dims(), heads)->decode_cluster_size(), 0);
  // Prefill chunks beside the decodes do not matter.
  const HybridBatch hybrid = make_batch({{100, 300}}, std::vector<int>(16, 16384));
  const AttentionPlan hybrid_plan = AttentionPlan::create(hybrid, llama_dims(), tile).value();
  EXPECT_EQ(hybrid_plan.decode_cluster_size(), 2);
  expect_plan_covers_batch(hybrid_plan, hybrid);
}

// GQA packing: when every prefill tile has at most 128 / group query rows
// (short chunks), the plan lets the warp-specialized kernel hold a KV head's
// whole group in one tile, and its split estimate counts one CTA per KV head.
TEST(AttentionPlanTest, PacksTheGroupsOfShortChunks) {
  // Group 4: chunks of up to 32 tokens pack, one of 33 does not.
  const HybridBatch turns = make_batch({{8176, 16}, {300, 32}, {0, 5}}, {100});
  EXPECT_EQ(AttentionPlan::create(turns, llama_dims(), h200())->prefill_pack(), 4);
  EXPECT_EQ(AttentionPlan::create(make_batch({{8176, 16}, {300, 33}}, {}), llama_dims(), h200())
                ->prefill_pack(),
            1);
  // Group 7 (not a divisor of 128): 18 tokens x 7 = 126 rows.
  const AttentionDims g7{14, 2, 128, DType::bf16};
  EXPECT_EQ(AttentionPlan::create(make_batch({{1000, 18}}, {}), g7, h200())->prefill_pack(), 7);
  EXPECT_EQ(AttentionPlan::create(make_batch({{1000, 19}}, {}), g7, h200())->prefill_pack(), 1);
  // No group to pack (MHA), or no prefill at all.
  EXPECT_EQ(AttentionPlan::create(make_batch({{1000, 5}}, {}), {8, 8, 128, DType::f16}, h200())
                ->prefill_pack(),
            1);
  EXPECT_EQ(AttentionPlan::create(make_batch({}, {4096}), llama_dims(), h200())->prefill_pack(), 1);
  // One 16-token turn over 16K: 8 packed CTAs instead of 32 one-head ones, so
  // the planner splits the keys further to fill the GPU.
  const HybridBatch one = make_batch({{16368, 16}}, {});
  PlanOptions unpacked = h200();
  unpacked.kernels.ws_gqa_pack = false;
  const AttentionPlan packed_plan = AttentionPlan::create(one, llama_dims(), h200()).value();
  const AttentionPlan unpacked_plan = AttentionPlan::create(one, llama_dims(), unpacked).value();
  EXPECT_EQ(unpacked_plan.prefill_pack(), 4) << "the items allow it; the option decides";
  EXPECT_GT(packed_plan.prefill_items().size(), unpacked_plan.prefill_items().size());
  EXPECT_LE(packed_plan.prefill_items().size() * llama_dims().num_kv_heads,
            2u * kH200Sms * kPrefillCtasPerSm);
  expect_plan_covers_batch(packed_plan, one);
}

// Short turns beside a long chunk: each turn's tile packs on its own
// (PrefillWorkItem::pack), the long chunk's tiles stay one head per tile, and
// the warp-specialized walk gives a packed item num_kv_heads tiles. The split
// estimate counts the packed items' fewer CTAs: a few turns over a long
// context beside a short chunk get split where one-head tiles would not be.
TEST(AttentionPlanTest, PacksShortTurnsBesideALongChunk) {
  const HybridBatch mixed = make_batch({{0, 2048}, {8176, 16}, {8170, 22}, {300, 40}}, {64});
  const AttentionPlan plan = AttentionPlan::create(mixed, llama_dims(), h200()).value();
  EXPECT_EQ(plan.prefill_pack(), 1);
  EXPECT_EQ(plan.prefill_packed_items(), 2);  // 16 and 22 tokens; 40 x 4 > 128 rows
  EXPECT_EQ(plan.ws_tiles(), (16 + 1) * 32 + 2 * 8);
  EXPECT_TRUE(plan.prefill_pack_mixed());
  for (const PrefillWorkItem& item : plan.prefill_items()) {
    EXPECT_EQ(item.pack, item.seq == 1 || item.seq == 2 ? 4 : 1) << "seq " << item.seq;
  }
  expect_plan_covers_batch(plan, mixed);

  // Two 16-token turns over 16K beside a 256-token prompt: 2 x 32 + 2 x 32
  // one-head CTAs, or 2 x 8 packed + 2 x 32: the packed plan splits the
  // turns' long keys to fill the GPU.
  const HybridBatch turns = make_batch({{16368, 16}, {16368, 16}, {0, 256}}, {});
  PlanOptions unpacked = h200();
  unpacked.kernels.ws_gqa_pack = false;
  const AttentionPlan packed_plan = AttentionPlan::create(turns, llama_dims(), h200()).value();
  const AttentionPlan unpacked_plan = AttentionPlan::create(turns, llama_dims(), unpacked).value();
  EXPECT_EQ(packed_plan.prefill_packed_items(),
            static_cast<int>(std::count_if(packed_plan.prefill_items().begin(),
                                           packed_plan.prefill_items().end(),
                                           [](const auto& i) { return i.pack == 4; })));
  EXPECT_GT(packed_plan.prefill_items().size(), unpacked_plan.prefill_items().size());
  expect_plan_covers_batch(packed_plan, turns);

  // A chunk over a long context whose last tile is 16 rows: that tile could
  // pack, but the tiles cost alike and packing saves under an eighth of the
  // work, so the kernel keeps its uniform (head-major) walk and no item packs,
  // so the split estimate counts its 32 one-head CTAs as the kernel runs them.
  const AttentionPlan tail =
      AttentionPlan::create(make_batch({{14336, 2064}}, {}), llama_dims(), h200()).value();
  EXPECT_EQ(tail.prefill_packed_items(), 0);
  EXPECT_TRUE(tail.prefill_items_cost_alike());
  EXPECT_FALSE(tail.prefill_pack_mixed());
  for (const PrefillWorkItem& item : tail.prefill_items()) EXPECT_EQ(item.pack, 1);
  EXPECT_EQ(tail.ws_tiles(), static_cast<int>(tail.prefill_items().size()) * 32);
  expect_plan_covers_batch(tail, make_batch({{14336, 2064}}, {}));
}

// The walk rule the planners share (attention_params.h), on (rows, key
// blocks) tiles with Llama-3-8B's heads (group 4: tiles of <= 32 rows pack).
TEST(AttentionPlanTest, GqaWalkRule) {
  using Tiles = std::vector<std::pair<int, int>>;
  auto rule = [](const Tiles& tiles) {
    return gqa_packable_tiles_pack(
        [&](auto&& f) {
          for (const auto& [rows, blocks] : tiles) f(rows, blocks);
        },
        32, 8);
  };
  EXPECT_FALSE(rule({}));                               // nothing to pack
  EXPECT_FALSE(rule({{128, 100}, {33, 101}}));          // no tile fits
  EXPECT_TRUE(rule({{16, 65}, {32, 10}}));              // every tile packs: uniform packed walk
  EXPECT_TRUE(rule({{128, 16}, {128, 17}, {16, 65}}));  // turns beside a chunk: costs differ
  // Costs alike, one packable tile of 17 (120 blocks each): packing saves
  // 120 x 24 of 17 x 120 x 32 key-block heads (under an eighth): the uniform
  // walk.
  Tiles alike(16, {128, 120});
  alike.push_back({16, 120});
  EXPECT_FALSE(rule(alike));
  // Costs alike, half the tiles packable: it saves 3/8 of the work.
  EXPECT_TRUE(rule({{128, 120}, {16, 120}}));
  // Not alike (1 against 120 blocks): per item, however small the saving.
  EXPECT_TRUE(rule({{128, 120}, {128, 119}, {16, 1}}));
  // MHA (group 1): nothing ever packs.
  EXPECT_FALSE(gqa_packable_tiles_pack([](auto&& f) { f(1, 1); }, 8, 8));
}

// A cluster launch only gets the slots whole clusters fit in (a cluster's CTAs
// share a GPC). On the H200 (head dim 128) clusters of 8 fill 240 of the 264
// slots, so 4 x 16K on the tile kernel, 32 (decode, KV head) units, must not
// merge 8 splits as clusters: 256 CTAs in clusters of 8 run two waves there
// (0.0842 ms, against 0.0701 for the same splits merged by the counters,
// docs/attention.md).
TEST(AttentionPlanTest, CountsTheSlotsLargeClustersStrand) {
  const HybridBatch batch = make_batch({}, std::vector<int>(4, 16384));
  PlanOptions tile = h200();
  tile.decode_kernel = DecodeKernel::tile;
  // Told nothing, the planner assumes every slot and takes clusters of 8.
  const AttentionPlan naive = AttentionPlan::create(batch, llama_dims(), tile).value();
  EXPECT_EQ(naive.decode_cluster_size(), 8);
  EXPECT_EQ(naive.decode_items().size(), 32u);
  tile.decode_cluster_slots.fill(kH200Sms * kDecodeCtasPerSm);
  tile.decode_cluster_slots[8] = 240;
  const AttentionPlan plan = AttentionPlan::create(batch, llama_dims(), tile).value();
  EXPECT_NE(plan.decode_cluster_size(), 8);
  EXPECT_EQ(plan.decode_items().size(), 32u) << "8 splits, now merged by the counters";
  const std::size_t ctas = plan.decode_items().size() * llama_dims().num_kv_heads;
  EXPECT_TRUE(plan.decode_cluster_size() == 0 || ctas <= 264u) << ctas << " CTAs";
  EXPECT_GT(ctas, 240u) << "fewer CTAs than slots would leave SMs without a decode";
  expect_plan_covers_batch(plan, batch);
  // Clusters of 2 strand nothing: 16 x 16K still merges its two splits as before.
  PlanOptions two = tile;
  const HybridBatch sixteen = make_batch({}, std::vector<int>(16, 16384));
  EXPECT_EQ(AttentionPlan::create(sixteen, llama_dims(), two)->decode_cluster_size(), 2);
}

// The deep decode kernel (one CTA per SM, decode_deep.cu) replaces a split
// tile plan when the unsplit decodes fit one CTA per SM and the estimate
// (half a block per key block on num_sms slots, no merge) beats the split
// tile plan; never the heads kernel's batches, never forced splits.
TEST(AttentionPlanTest, PicksTheDeepKernelForUnsplitDecodesThatFitTheSms) {
  auto plan_for = [](const std::vector<int>& contexts, PlanOptions options = h200(),
                     AttentionDims dims = llama_dims()) {
    return AttentionPlan::create(make_batch({}, contexts), dims, options).value();
  };
  auto expect_unsplit = [](const AttentionPlan& plan, const std::vector<int>& contexts) {
    ASSERT_EQ(plan.decode_items().size(), contexts.size());
    EXPECT_TRUE(plan.decode_combines().empty());
    EXPECT_EQ(plan.decode_cluster_size(), 0);
    EXPECT_EQ(plan.workspace_bytes(), 0u);
    for (const DecodeWorkItem& item : plan.decode_items()) {
      EXPECT_EQ(item.kv_begin, 0);
      EXPECT_EQ(item.kv_end, contexts[item.seq]);
      EXPECT_EQ(item.partial_row, -1);
    }
  };
  // 16 x 16K, 8 KV heads: 128 CTAs on 132 SMs.
  const std::vector<int> few(16, 16384);
  const AttentionPlan deep = plan_for(few);
  EXPECT_EQ(deep.decode_kernel(), DecodeKernel::tile_deep);
  EXPECT_EQ(deep.decode_ctas_per_item(), 8);
  expect_unsplit(deep, few);
  expect_plan_covers_batch(deep, make_batch({}, few));
  // Odd, slightly unequal lengths, and short contexts: still unsplit on the
  // deep kernel.
  std::vector<int> odd(16, 16385);
  odd[3] = 16000;
  odd[7] = 16383;
  odd[15] = 16255;
  expect_unsplit(plan_for(odd), odd);
  EXPECT_EQ(plan_for(odd).decode_kernel(), DecodeKernel::tile_deep);
  const std::vector<int> short_ones(16, 1024);
  EXPECT_EQ(plan_for(short_ones).decode_kernel(), DecodeKernel::tile_deep);
  // Very unequal lengths (1, 255, 4095 beside 16K): the tile plan's finer
  // splits fill the slots better (7 splits of 37 blocks: 760 CTAs in three
  // nearly full waves), estimated faster than one long CTA per unit.
  std::vector<int> uneven(16, 16385);
  uneven[3] = 1;
  uneven[7] = 4095;
  uneven[15] = 255;
  EXPECT_EQ(plan_for(uneven).decode_kernel(), DecodeKernel::tile);
  // 17 x 16K: 136 units do not fit 132 SMs: the tile kernel, split.
  const AttentionPlan over = plan_for(std::vector<int>(17, 16384));
  EXPECT_EQ(over.decode_kernel(), DecodeKernel::tile);
  EXPECT_GT(over.decode_items().size(), 17u);
  // 4 x 16K: 32 units; splitting 8 ways on the tile kernel (256 CTAs) beats
  // one long CTA per unit.
  const AttentionPlan four = plan_for(std::vector<int>(4, 16384));
  EXPECT_EQ(four.decode_kernel(), DecodeKernel::tile);
  EXPECT_GE(four.decode_items().size(), 4u * 4u);
  // One long decode among short ones: the long one must be split so that it
  // does not outlast the rest (here on the heads kernel); not the deep kernel.
  std::vector<int> skewed(12, 512);
  skewed.push_back(65536);
  EXPECT_NE(plan_for(skewed).decode_kernel(), DecodeKernel::tile_deep);
  EXPECT_GT(plan_for(skewed).decode_items().size(), skewed.size());
  // Unsplit already (32 x 4K: 256 CTAs fill the slots) or the heads kernel
  // (64 x 8K): unchanged.
  EXPECT_EQ(plan_for(std::vector<int>(32, 4096)).decode_kernel(), DecodeKernel::tile);
  EXPECT_EQ(plan_for(std::vector<int>(64, 8192)).decode_kernel(), DecodeKernel::heads);
  // Forced splits or an explicit kernel are kept as asked.
  PlanOptions two = h200();
  two.decode_splits = 2;
  const AttentionPlan forced = plan_for(few, two);
  EXPECT_EQ(forced.decode_kernel(), DecodeKernel::tile);
  EXPECT_EQ(forced.decode_items().size(), 32u);
  EXPECT_EQ(forced.decode_cluster_size(), 2);
  // Asked for, the deep kernel plans its own splits (here: none) and never
  // clusters; forced splits merge through the counters.
  PlanOptions asked = h200();
  asked.decode_kernel = DecodeKernel::tile_deep;
  expect_unsplit(plan_for(few, asked), few);
  asked.decode_splits = 2;
  const AttentionPlan deep_split = plan_for(few, asked);
  EXPECT_EQ(deep_split.decode_kernel(), DecodeKernel::tile_deep);
  EXPECT_EQ(deep_split.decode_items().size(), 32u);
  EXPECT_EQ(deep_split.decode_cluster_size(), 0);
  EXPECT_EQ(deep_split.decode_combines().size(), 16u);
  EXPECT_EQ(deep_split.decode_counter_count(), 16u * 8u);
  expect_plan_covers_batch(deep_split, make_batch({}, few));
  // Other head counts: units = KV heads x head chunks. 4 KV heads x 2 chunks
  // (group 20) x 16 decodes = 128 units: deep; head_dim 64 too.
  EXPECT_EQ(plan_for(few, h200(), {80, 4, 128, DType::bf16}).decode_kernel(),
            DecodeKernel::tile_deep);
  EXPECT_EQ(plan_for(few, h200(), {32, 8, 64, DType::f16}).decode_kernel(),
            DecodeKernel::tile_deep);
  // A smaller GPU (114 SMs): 128 units do not fit one per SM.
  PlanOptions small = h200();
  small.num_sms = 114;
  EXPECT_EQ(plan_for(few, small).decode_kernel(), DecodeKernel::tile);
}

// The default plans of attention.h's planner, pinned on the H200's SM count:
// decode kernel, cluster merge, partial rows and the exact work lists (their
// hash). A refactor of the planner must reproduce them bit for bit.
TEST(AttentionPlanTest, DefaultPlansArePinned) {
  struct Pinned {
    const char* name;
    std::vector<testing::SeqSpec> prefills;  // {cached_len, num_new}
    int num_decodes, decode_ctx;
    DecodeKernel decode_kernel;
    int decode_cluster_size, partial_rows;
    std::size_t prefill_items, decode_items;
    std::uint64_t work_lists;
  };
  const Pinned cases[] = {
      {"32 decodes @4096", {}, 32, 4096, DecodeKernel::tile, 0, 0, 0, 32, 0x51134e53c8de1203ull},
      {"64 decodes @8192",
       {},
       64,
       8192,
       DecodeKernel::heads,
       2,
       128,
       0,
       128,
       0x6de20fb45c579983ull},
      {"16 decodes @16384",
       {},
       16,
       16384,
       DecodeKernel::tile_deep,
       0,
       0,
       0,
       16,
       0xc89dfb3e0076bac3ull},
      {"17 decodes @16384",
       {},
       17,
       16384,
       DecodeKernel::tile,
       7,
       119,
       0,
       119,
       0x524e399cdd0fef0aull},
      {"4 decodes @16384", {}, 4, 16384, DecodeKernel::tile, 8, 32, 0, 32, 0xce2f32c332a69e03ull},
      {"128 decodes @4096",
       {},
       128,
       4096,
       DecodeKernel::heads,
       0,
       0,
       0,
       128,
       0x3c5d5c13d2fdd983ull},
      {"256 decodes @2048", {}, 256, 2048, DecodeKernel::tile, 0, 0, 0, 256, 0x802d9174fe286983ull},
      {"prefill 4096", {{0, 4096}}, 0, 0, DecodeKernel::tile, 0, 0, 32, 0, 0x4bf3fd12c8346cc3ull},
      {"chunk 1024 @8192",
       {{7168, 1024}},
       0,
       0,
       DecodeKernel::tile,
       0,
       0,
       8,
       0,
       0x29efeb4eb40532ffull},
      {"chunk 2048 @16384",
       {{14336, 2048}},
       0,
       0,
       DecodeKernel::tile,
       0,
       0,
       16,
       0,
       0x366d9df5123638cull},
      {"chunk 128 @16384",
       {{16256, 128}},
       0,
       0,
       DecodeKernel::tile,
       0,
       1024,
       8,
       0,
       0xeb45b6c6d9464003ull},
      {"2048@6144 + 32@8192",
       {{6144, 2048}},
       32,
       8192,
       DecodeKernel::tile,
       0,
       0,
       16,
       32,
       0xc00ff56af7113e33ull},
  };
  for (const Pinned& c : cases) {
    const HybridBatch batch = make_batch(c.prefills, std::vector<int>(c.num_decodes, c.decode_ctx));
    auto plan = AttentionPlan::create(batch, llama_dims(), h200());
    ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status().to_string();
    EXPECT_EQ(plan->decode_kernel(), c.decode_kernel) << c.name;
    EXPECT_EQ(plan->decode_cluster_size(), c.decode_cluster_size) << c.name;
    EXPECT_EQ(plan->partial_rows(), c.partial_rows) << c.name;
    EXPECT_EQ(plan->prefill_items().size(), c.prefill_items) << c.name;
    EXPECT_EQ(plan->decode_items().size(), c.decode_items) << c.name;
    EXPECT_EQ(testing::work_list_hash(*plan), c.work_lists) << c.name;
  }
}

TEST(AttentionPlanTest, UploadChecksTheBuffer) {
  auto plan = AttentionPlan::create(make_batch({{0, 10}}, {5}), llama_dims(), h200());
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->metadata_bytes(), 0u);
  AttentionBuffers too_small;
  EXPECT_EQ(plan->upload(too_small, nullptr).code(), StatusCode::invalid_argument);
}

// ---------------------------------------------------------------------------
// Launcher validation (every case fails before anything touches a GPU)
// ---------------------------------------------------------------------------

// Aligned addresses that are never dereferenced: validation rejects first.
void* fake(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

struct LaunchFixture {
  AttentionDims dims = llama_dims();
  HybridBatch batch = make_batch({{100, 300}}, {4000, 20000});
  AttentionPlan plan = AttentionPlan::create(batch, dims, h200()).value();
  AttentionBuffers buffers{fake(0x100000), plan.metadata_bytes(), fake(0x200000),
                           plan.workspace_bytes()};
  TensorView q{fake(0x300000), DType::f16, {302, 32, 128}, Device::cuda};
  TensorView out{fake(0x400000), DType::f16, {302, 32, 128}, Device::cuda};
  TensorView k_new{fake(0x800000), DType::f16, {302, 8, 128}, Device::cuda};
  TensorView v_new{fake(0x900000), DType::f16, {302, 8, 128}, Device::cuda};
  KvLayerView kv = [] {
    KvLayerView v;
    v.k = fake(0x500000);
    v.v = fake(0x600000);
    v.dtype = DType::f16;
    v.device = Device::cuda;
    v.num_slots = 3;
    v.max_ctx = 32768;
    v.num_kv_heads = 8;
    v.head_dim = 128;
    v.head_stride = 128;
    v.token_stride = 1024;
    v.slot_stride = 1024LL * 32768;
    return v;
  }();
  PagedKvView paged = [] {
    PagedKvView v;
    v.k = fake(0x500000);
    v.v = fake(0x600000);
    v.dtype = DType::f16;
    v.device = Device::cuda;
    v.num_blocks = 10000;
    v.block_size = 16;
    v.num_kv_heads = 8;
    v.head_dim = 128;
    v.head_stride = 128;
    v.token_stride = 1024;
    v.block_stride = 1024 * 16;
    v.block_table = static_cast<const std::int32_t*>(fake(0x700000));
    v.num_slots = 3;
    v.max_blocks_per_slot = 2048;
    return v;
  }();
};

TEST(AttentionLaunchTest, AcceptsConsistentInputs) {
  LaunchFixture f;
  EXPECT_TRUE(validate_token_view("q", f.q, f.plan, 32).ok());
  EXPECT_TRUE(validate_kv_view(f.kv, f.plan).ok());
  EXPECT_TRUE(validate_paged_kv_view(f.paged, f.plan).ok());
  EXPECT_TRUE(validate_buffers(f.buffers, f.plan).ok());
  EXPECT_TRUE(validate_softmax_scale(0.088f).ok());
  // A fused QKV buffer's q (token stride larger than heads * dim) is fine.
  TensorView fused(fake(0x300000), DType::f16, {302, 32, 128}, {48 * 128, 128, 1}, Device::cuda);
  EXPECT_TRUE(validate_token_view("q", fused, f.plan, 32).ok());
}

TEST(AttentionLaunchTest, RejectsMismatchedQueries) {
  LaunchFixture f;
  const float scale = 0.088f;
  auto prefill_with_q = [&](const TensorView& q) {
    return prefill(f.plan, f.buffers, q, f.kv, f.out, scale, nullptr).code();
  };
  EXPECT_EQ(prefill_with_q(TensorView(fake(0x300000), DType::bf16, {302, 32, 128}, Device::cuda)),
            StatusCode::invalid_argument);
  EXPECT_EQ(prefill_with_q(TensorView(fake(0x300000), DType::f16, {302, 32, 128}, Device::cpu)),
            StatusCode::invalid_argument);
  EXPECT_EQ(prefill_with_q(TensorView(fake(0x300000), DType::f16, {302, 16, 128}, Device::cuda)),
            StatusCode::invalid_argument);
  EXPECT_EQ(prefill_with_q(TensorView(fake(0x300000), DType::f16, {301, 32, 128}, Device::cuda)),
            StatusCode::invalid_argument);
  EXPECT_EQ(prefill_with_q(TensorView(fake(0x300000), DType::f16, {302, 32, 128},
                                      {32 * 128 + 4, 128, 1}, Device::cuda)),
            StatusCode::invalid_argument);
  EXPECT_EQ(prefill_with_q(TensorView(fake(0x300000), DType::f16, {302, 32, 128}, {32 * 128, 1, 32},
                                      Device::cuda)),
            StatusCode::invalid_argument);
  EXPECT_EQ(prefill_with_q(TensorView(fake(0x300008), DType::f16, {302, 32, 128}, Device::cuda)),
            StatusCode::invalid_argument);
  EXPECT_EQ(decode(f.plan, f.buffers, f.q, f.kv, f.out, 0.f, nullptr).code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(decode(f.plan, f.buffers, f.q, f.kv, f.out, NAN, nullptr).code(),
            StatusCode::invalid_argument);
}

TEST(AttentionLaunchTest, RejectsMismatchedKv) {
  LaunchFixture f;
  auto decode_with = [&](const KvLayerView& kv) {
    return decode(f.plan, f.buffers, f.q, kv, f.out, 0.1f, nullptr).code();
  };
  KvLayerView kv = f.kv;
  kv.num_kv_heads = 4;
  EXPECT_EQ(decode_with(kv), StatusCode::invalid_argument);
  kv = f.kv;
  kv.dtype = DType::bf16;
  EXPECT_EQ(decode_with(kv), StatusCode::invalid_argument);
  kv = f.kv;
  kv.num_slots = 2;  // the batch uses slot 2
  EXPECT_EQ(decode_with(kv), StatusCode::out_of_range);
  kv = f.kv;
  kv.max_ctx = 16384;  // a decode reaches 20000 tokens
  EXPECT_EQ(decode_with(kv), StatusCode::out_of_range);
  kv = f.kv;
  kv.token_stride = 1028;  // rows not 16-byte aligned
  EXPECT_EQ(decode_with(kv), StatusCode::invalid_argument);
  kv = f.kv;
  kv.v = fake(0x600002);
  EXPECT_EQ(decode_with(kv), StatusCode::invalid_argument);
  kv = f.kv;
  kv.device = Device::cpu;
  EXPECT_EQ(decode_with(kv), StatusCode::invalid_argument);
  TensorView k_new(fake(0x800000), DType::f16, {302, 4, 128}, Device::cuda);
  EXPECT_EQ(append_kv(f.plan, f.buffers, k_new, k_new, f.kv, nullptr).code(),
            StatusCode::invalid_argument);
}

// The paged append (vpod writes FlashInfer's pages) validates the view.
TEST(AttentionLaunchTest, RejectsMismatchedPagedKv) {
  LaunchFixture f;
  auto run = [&](const PagedKvView& kv) {
    return append_kv(f.plan, f.buffers, f.k_new, f.v_new, kv, nullptr).code();
  };
  PagedKvView kv = f.paged;
  kv.block_size = 24;
  EXPECT_EQ(run(kv), StatusCode::invalid_argument);
  kv = f.paged;
  kv.block_table = nullptr;
  EXPECT_EQ(run(kv), StatusCode::invalid_argument);
  kv = f.paged;
  kv.max_blocks_per_slot = 1000;  // 16000 tokens < 20000
  EXPECT_EQ(run(kv), StatusCode::out_of_range);
  kv = f.paged;
  kv.num_slots = 1;
  EXPECT_EQ(run(kv), StatusCode::out_of_range);
}

TEST(AttentionLaunchTest, RejectsSmallBuffers) {
  LaunchFixture f;
  ASSERT_GT(f.plan.workspace_bytes(), 0u) << "the 20000-token decode is split";
  AttentionBuffers buffers = f.buffers;
  buffers.metadata_bytes -= 16;
  EXPECT_EQ(decode(f.plan, buffers, f.q, f.kv, f.out, 0.1f, nullptr).code(),
            StatusCode::invalid_argument);
  buffers = f.buffers;
  buffers.workspace = nullptr;
  EXPECT_EQ(decode(f.plan, buffers, f.q, f.kv, f.out, 0.1f, nullptr).code(),
            StatusCode::invalid_argument);
}

// ---------------------------------------------------------------------------
// References
// ---------------------------------------------------------------------------

struct HostCase {
  AttentionDims dims;
  HybridBatch batch;
  HostKvCache cache;
  std::vector<std::uint16_t> q, k_new, v_new;

  HostCase(const AttentionDims& d, const HybridBatch& b, KvLayout layout, std::mt19937_64& rng)
      : dims(d), batch(b), cache(d, layout, slots(b), max_ctx(b), rng) {
    const std::size_t tokens = static_cast<std::size_t>(batch.num_tokens());
    q = testing::random_values(tokens * dims.num_q_heads * dims.head_dim, dims.dtype, rng);
    k_new = testing::random_values(tokens * dims.num_kv_heads * dims.head_dim, dims.dtype, rng);
    v_new = testing::random_values(tokens * dims.num_kv_heads * dims.head_dim, dims.dtype, rng);
    cache.fill_cached(batch, rng);
  }
  static int slots(const HybridBatch& b) {
    return static_cast<int>(b.prefills.size() + b.decodes.size());
  }
  static int max_ctx(const HybridBatch& b) {
    int m = 1;
    for (const auto* l : {&b.prefills, &b.decodes}) {
      for (const auto& s : *l) m = std::max(m, s.context_len());
    }
    return m;
  }
  TensorView q_view() {
    return TensorView(q.data(), dims.dtype, {batch.num_tokens(), dims.num_q_heads, dims.head_dim});
  }
  TensorView kv_new_view(std::vector<std::uint16_t>& x) {
    return TensorView(x.data(), dims.dtype, {batch.num_tokens(), dims.num_kv_heads, dims.head_dim});
  }
  Status append() {
    if (testing::is_paged(cache.layout)) {
      return reference_append_kv(batch, dims, kv_new_view(k_new), kv_new_view(v_new), paged());
    }
    return reference_append_kv(batch, dims, kv_new_view(k_new), kv_new_view(v_new), contiguous());
  }
  KvLayerView contiguous() { return cache.view(cache.k.data(), cache.v.data(), Device::cpu); }
  PagedKvView paged() {
    return cache.paged_view(cache.k.data(), cache.v.data(), cache.block_table.data(), Device::cpu);
  }
  std::vector<float> attend(ReferencePrecision precision, float scale) {
    std::vector<float> out(static_cast<std::size_t>(batch.num_tokens()) * dims.num_q_heads *
                           dims.head_dim);
    TensorView o(out.data(), DType::f32, {batch.num_tokens(), dims.num_q_heads, dims.head_dim});
    const Status s =
        testing::is_paged(cache.layout)
            ? reference_attention(batch, dims, q_view(), paged(), o, scale, precision)
            : reference_attention(batch, dims, q_view(), contiguous(), o, scale, precision);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
};

TEST(AttentionReferenceTest, FirstRowOfAFreshPromptCopiesItsValue) {
  std::mt19937_64 rng(1);
  const AttentionDims dims{4, 2, 64, DType::f16};
  HostCase c(dims, make_batch({{0, 5}}, {}), KvLayout::per_layer, rng);
  ASSERT_TRUE(c.append().ok());
  const std::vector<float> out = c.attend(ReferencePrecision::fp64, 0.125f);
  // Row 0 sees only key 0: its output is v_new[0] of its KV head, exactly.
  for (int h = 0; h < 4; ++h) {
    for (int d = 0; d < 64; ++d) {
      const float v = half_bits_to_float(c.v_new[(h / 2) * 64 + d]);
      EXPECT_EQ(out[h * 64 + d], v) << "head " << h << " dim " << d;
    }
  }
}

TEST(AttentionReferenceTest, MatchesAHandComputedSoftmax) {
  std::mt19937_64 rng(2);
  const AttentionDims dims{1, 1, 64, DType::f16};
  HostCase c(dims, make_batch({}, {3}), KvLayout::per_layer, rng);
  // Keys 0..2 at positions 0..2 (the last one appended): q = e0, k_t = t * e0,
  // v_t = (t + 1) * e1. Scores t * scale; output on dim 1 = sum softmax * (t + 1).
  std::fill(c.q.begin(), c.q.end(), testing::to_bits(DType::f16, 0.f));
  c.q[0] = testing::to_bits(DType::f16, 1.f);
  for (int t = 0; t < 3; ++t) {
    std::uint16_t* k = t < 2 ? &c.cache.k[c.cache.index(0, t, 0)] : c.k_new.data();
    std::uint16_t* v = t < 2 ? &c.cache.v[c.cache.index(0, t, 0)] : c.v_new.data();
    for (int d = 0; d < 64; ++d) {
      k[d] = testing::to_bits(DType::f16, d == 0 ? static_cast<float>(t) : 0.f);
      v[d] = testing::to_bits(DType::f16, d == 1 ? static_cast<float>(t + 1) : 0.f);
    }
  }
  ASSERT_TRUE(c.append().ok());
  const float scale = 0.7f;
  const std::vector<float> out = c.attend(ReferencePrecision::fp64, scale);
  double num = 0, den = 0;
  for (int t = 0; t < 3; ++t) {
    num += std::exp(t * static_cast<double>(scale)) * (t + 1);
    den += std::exp(t * static_cast<double>(scale));
  }
  EXPECT_NEAR(out[1], num / den, 1e-6);
  EXPECT_EQ(out[0], 0.f);
}

TEST(AttentionReferenceTest, PrecisionsAgreeToTheirRounding) {
  std::mt19937_64 rng(3);
  for (DType dtype : {DType::f16, DType::bf16}) {
    HostCase c({8, 2, 64, dtype}, make_batch({{40, 30}}, {77, 1}), KvLayout::per_layer, rng);
    ASSERT_TRUE(c.append().ok());
    const auto exact = c.attend(ReferencePrecision::fp64, 0.125f);
    const auto fp32 = c.attend(ReferencePrecision::fp32, 0.125f);
    const auto naive = c.attend(ReferencePrecision::naive, 0.125f);
    double err32 = 0, err_naive = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      ASSERT_TRUE(std::isfinite(exact[i]));
      err32 = std::max(err32, std::abs(static_cast<double>(fp32[i]) - exact[i]));
      err_naive = std::max(err_naive, std::abs(static_cast<double>(naive[i]) - exact[i]));
    }
    EXPECT_LT(err32, 1e-5);
    // The naive implementation rounds to the dtype: visibly worse than fp32,
    // yet within a few units in the last place of the outputs (|o| < ~3).
    EXPECT_GT(err_naive, err32);
    EXPECT_LT(err_naive, dtype == DType::f16 ? 1e-2 : 6e-2);
  }
}

TEST(AttentionReferenceTest, GroupsReadTheirOwnKvHead) {
  std::mt19937_64 rng(4);
  const AttentionDims dims{14, 2, 128, DType::bf16};  // group 7
  HostCase c(dims, make_batch({{20, 9}}, {33}), KvLayout::per_layer, rng);
  ASSERT_TRUE(c.append().ok());
  // V of KV head 1 is constant 5: every query head of group 1 outputs 5.
  for (int slot = 0; slot < 2; ++slot) {
    for (int t = 0; t < c.cache.max_ctx; ++t) {
      const std::size_t at = c.cache.index(slot, t, 1);
      for (int d = 0; d < 128; ++d) c.cache.v[at + d] = testing::to_bits(DType::bf16, 5.f);
    }
  }
  const auto out = c.attend(ReferencePrecision::fp64, 0.09f);
  for (int token = 0; token < c.batch.num_tokens(); ++token) {
    for (int h = 0; h < 14; ++h) {
      const float o = out[(static_cast<std::size_t>(token) * 14 + h) * 128 + 3];
      if (h >= 7) {
        EXPECT_FLOAT_EQ(o, 5.f);
      } else {
        EXPECT_NE(o, 5.f);
      }
    }
  }
}

TEST(AttentionReferenceTest, FutureKeysDoNotMatter) {
  std::mt19937_64 rng(5);
  const AttentionDims dims{4, 4, 64, DType::f16};
  HostCase c(dims, make_batch({{10, 6}}, {}), KvLayout::per_layer, rng);
  ASSERT_TRUE(c.append().ok());
  const auto before = c.attend(ReferencePrecision::fp64, 0.125f);
  // Overwrite the last new token's K/V: only the last row may change.
  for (int h = 0; h < 4; ++h) {
    const std::size_t at = c.cache.index(0, 15, h);
    for (int d = 0; d < 64; ++d) c.cache.k[at + d] = c.cache.v[at + d] = 0x3c00;  // 1.0
  }
  const auto after = c.attend(ReferencePrecision::fp64, 0.125f);
  const std::size_t row = 4 * 64;
  for (std::size_t i = 0; i < 5 * row; ++i) ASSERT_EQ(before[i], after[i]);
  bool last_changed = false;
  for (std::size_t i = 5 * row; i < 6 * row; ++i) last_changed |= before[i] != after[i];
  EXPECT_TRUE(last_changed);
}

TEST(AttentionReferenceTest, PagedEqualsContiguous) {
  for (KvLayout layout : {KvLayout::all_layers, KvLayout::paged16, KvLayout::paged256}) {
    std::mt19937_64 rng_a(6), rng_b(6);
    const AttentionDims dims{8, 2, 64, DType::bf16};
    const HybridBatch batch = make_batch({{300, 40}, {0, 17}}, {1, 600});
    HostCase contiguous(dims, batch, KvLayout::per_layer, rng_a);
    HostCase other(dims, batch, layout, rng_b);
    // Same random stream, same values: copy the cached tokens across layouts.
    for (const auto* list : {&batch.prefills, &batch.decodes}) {
      for (const BatchSequence& s : *list) {
        for (int t = 0; t < s.cached_len; ++t) {
          for (int h = 0; h < 2; ++h) {
            for (int d = 0; d < 64; ++d) {
              other.cache.k[other.cache.index(s.slot, t, h) + d] =
                  contiguous.cache.k[contiguous.cache.index(s.slot, t, h) + d];
              other.cache.v[other.cache.index(s.slot, t, h) + d] =
                  contiguous.cache.v[contiguous.cache.index(s.slot, t, h) + d];
            }
          }
        }
      }
    }
    other.q = contiguous.q;
    other.k_new = contiguous.k_new;
    other.v_new = contiguous.v_new;
    ASSERT_TRUE(contiguous.append().ok());
    ASSERT_TRUE(other.append().ok());
    EXPECT_EQ(contiguous.attend(ReferencePrecision::fp32, 0.125f),
              other.attend(ReferencePrecision::fp32, 0.125f))
        << testing::layout_name(layout);
  }
}

TEST(AttentionReferenceTest, AppendWritesOnlyTheNewPositions) {
  for (KvLayout layout : {KvLayout::per_layer, KvLayout::all_layers, KvLayout::paged16}) {
    std::mt19937_64 rng(7);
    const AttentionDims dims{4, 2, 64, DType::f16};
    const HybridBatch batch = make_batch({{5, 3}}, {9});
    HostCase c(dims, batch, layout, rng);
    const std::vector<std::uint16_t> k_before = c.cache.k;
    ASSERT_TRUE(c.append().ok());
    std::size_t changed = 0;
    for (std::size_t i = 0; i < k_before.size(); ++i) changed += k_before[i] != c.cache.k[i];
    EXPECT_EQ(changed, 4u * 2 * 64) << "4 tokens x 2 heads x 64 dims";
    // Decode token (row 3) of KV head 1 sits at position 8 of its slot.
    const std::size_t at = c.cache.index(batch.decodes[0].slot, 8, 1);
    for (int d = 0; d < 64; ++d) EXPECT_EQ(c.cache.k[at + d], c.k_new[(3 * 2 + 1) * 64 + d]);
  }
}

// What a TMA descriptor cannot describe is refused before the driver is
// asked (so this runs without a GPU), with the reason, and the launchers then
// fall back to cp.async (valid = 0).
TEST(KvTensorMapTest, RefusesWhatTheBoxCannotExpress) {
  KvLayerView kv;
  kv.k = reinterpret_cast<void*>(std::uintptr_t{1} << 20);
  kv.v = reinterpret_cast<void*>(std::uintptr_t{1} << 21);
  kv.dtype = DType::bf16;
  kv.device = Device::cuda;
  kv.num_slots = 4;
  kv.max_ctx = 1024;
  kv.num_kv_heads = 8;
  kv.head_dim = 128;
  kv.head_stride = 128;
  kv.token_stride = 8 * 128;
  kv.slot_stride = 1024 * 8 * 128;
  struct Case {
    const char* what;
    KvLayerView view;
    const char* reason;
  };
  std::vector<Case> cases;
  cases.push_back({"host memory", kv, "on cuda"});
  cases.back().view.device = Device::cpu;
  cases.push_back({"fp32", kv, "2-byte elements"});
  cases.back().view.dtype = DType::f32;
  cases.push_back({"head_dim 96", kv, "64 dims wide"});
  cases.back().view.head_dim = 96;
  cases.push_back({"no slots", kv, "non-empty"});
  cases.back().view.num_slots = 0;
  for (const Case& c : cases) {
    KvTensorMaps maps;
    maps.valid = 1;
    const Status st = encode_kv_tensor_maps(c.view, maps);
    EXPECT_FALSE(st.ok()) << c.what;
    EXPECT_NE(st.message().find(c.reason), std::string::npos) << c.what << ": " << st.message();
    EXPECT_EQ(maps.valid, 0) << c.what;
    EXPECT_EQ(contiguous_tensor_maps(c.view).valid, 0) << c.what;
  }
}

}  // namespace
}  // namespace vpod::attention
