// The paged baseline on the CPU: block allocation, block tables, capacity,
// out-of-memory, and data addressed through PagedKvView exactly as a
// paged-attention kernel would (a random workload against a model).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kv_test_util.h"
#include "kvcache/paged_kv_cache.h"

namespace vpod::kvcache {
namespace {

using testing::paged_element;
using testing::pattern;

PagedKvCacheConfig small_paged(int block_size, int blocks) {
  PagedKvCacheConfig config;
  config.shape = KvShape{3, 2, 8, DType::f32};
  config.block_size = block_size;
  config.max_slots = 8;
  config.max_ctx = 300;
  config.memory_bytes =
      static_cast<std::size_t>(blocks) * block_size * config.shape.bytes_per_token();
  return config;
}

void write_paged(const PagedKvCache& cache, int slot, std::uint32_t tag, std::int64_t begin,
                 std::int64_t end) {
  const KvShape& shape = cache.config().shape;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const PagedKvView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv) {
      for (std::int64_t t = begin; t < end; ++t) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int d = 0; d < shape.head_dim; ++d) {
            *paged_element(view, kv, slot, t, h, d) = pattern(tag, layer, kv, t, h, d);
          }
        }
      }
    }
  }
}

std::int64_t paged_mismatches(const PagedKvCache& cache, int slot, std::uint32_t tag,
                              std::int64_t end) {
  const KvShape& shape = cache.config().shape;
  std::int64_t bad = 0;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const PagedKvView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv) {
      for (std::int64_t t = 0; t < end; ++t) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int d = 0; d < shape.head_dim; ++d) {
            bad += *paged_element(view, kv, slot, t, h, d) != pattern(tag, layer, kv, t, h, d);
          }
        }
      }
    }
  }
  return bad;
}

TEST(PagedKvCache, TheStoreViewHoldsEveryLayersTables) {
  auto created = PagedKvCache::create(small_paged(16, 20));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  const KvCacheView view = (*created)->view();
  ASSERT_TRUE(view.is_paged());
  ASSERT_EQ(view.num_layers(), 3);
  for (int l = 0; l < 3; ++l) {
    const PagedKvView expected = (*created)->layer_view(l);
    EXPECT_EQ(view.paged[l].k, expected.k);
    EXPECT_EQ(view.paged[l].v, expected.v);
    EXPECT_EQ(view.paged[l].block_table, expected.block_table);
    EXPECT_EQ(view.paged[l].max_blocks_per_slot, 19);
  }
}

// Admission (KvCapacity) in blocks: a promise of n tokens is ceil(n / 16)
// blocks; prepare(batch) allocates the step's blocks.
TEST(PagedKvCache, PromisesBlocksAndPreparesTheStep) {
  auto created = PagedKvCache::create(small_paged(16, 20));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  PagedKvCache& cache = **created;
  EXPECT_EQ(cache.total_units(), 20);
  EXPECT_EQ(cache.max_tokens_per_slot(), 300);
  EXPECT_FALSE(cache.can_allocate(301, {}));
  const int a = cache.allocate(40, {}).slot;  // 3 blocks
  EXPECT_EQ(cache.used_units(), 3);
  EXPECT_TRUE(cache.grow(a, 48));  // still 3
  EXPECT_EQ(cache.used_units(), 3);
  EXPECT_TRUE(cache.grow(a, 49));  // 4
  EXPECT_EQ(cache.used_units(), 4);
  EXPECT_TRUE(cache.can_allocate(256, {}));   // 16 blocks: 20 in all
  EXPECT_FALSE(cache.can_allocate(257, {}));  // 17
  EXPECT_FALSE(cache.grow(a, 301));
  EXPECT_EQ(cache.used_units(), 4);  // a failed grow changes nothing
  HybridBatch batch;
  batch.prefills.push_back({.slot = a, .cached_len = 0, .num_new = 40, .token_offset = 0});
  ASSERT_TRUE(cache.prepare(batch).ok());
  EXPECT_EQ(cache.backed_tokens(a), 48);  // 3 blocks; growth beyond is on demand
  EXPECT_DOUBLE_EQ(cache.usage(), 0.2);
  cache.free(a);
  EXPECT_EQ(cache.used_units(), 0);
  EXPECT_EQ(cache.num_free_slots(), 8);
  EXPECT_EQ(cache.free_tokens(), 320);
  EXPECT_TRUE(cache.check_invariants().ok());
}

TEST(PagedKvCache, AllocatesBlocksAndReportsCapacity) {
  auto created = PagedKvCache::create(small_paged(16, 20));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  PagedKvCache& cache = **created;
  EXPECT_EQ(cache.num_blocks(), 20);
  EXPECT_EQ(cache.max_blocks_per_slot(), 19);  // ceil(300 / 16)
  EXPECT_EQ(cache.capacity_tokens(), 320);
  const int a = *cache.acquire(40);
  ASSERT_TRUE(cache.ensure(a, 40).ok());
  EXPECT_EQ(cache.block_table(a), (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(cache.backed_tokens(a), 48);
  EXPECT_EQ(cache.free_tokens(), 17 * 16);
  EXPECT_EQ(cache.capacity_tokens(a), 300);  // capped by max_ctx
  const int b = *cache.acquire(0);
  const Status oom = cache.ensure(b, 300);  // 19 blocks, 17 free
  EXPECT_EQ(oom.code(), StatusCode::resource_exhausted);
  EXPECT_NE(oom.message().find("out of KV blocks"), std::string::npos);
  EXPECT_EQ(cache.backed_tokens(b), 0);
  const KvStats stats = cache.stats();
  EXPECT_EQ(stats.pages_total, 20);
  EXPECT_EQ(stats.pages_mapped, 3);
  EXPECT_EQ(stats.tokens_used, 40);
  EXPECT_DOUBLE_EQ(stats.internal_fragmentation, 1.0 - 40.0 / 48.0);
  ASSERT_TRUE(cache.release(a, nullptr).ok());
  EXPECT_EQ(cache.free_tokens(), 20 * 16);
  ASSERT_TRUE(cache.ensure(b, 300).ok());
  // LIFO: b's first blocks are a's freed ones, most recently freed first.
  EXPECT_EQ(cache.block_table(b)[0], 0);
  EXPECT_EQ(cache.prepare(std::vector<SlotTokens>{{b, 301}}).status().code(),
            StatusCode::out_of_range);
  EXPECT_EQ(cache.release(a, nullptr).code(), StatusCode::failed_precondition);
  ASSERT_TRUE(cache.check_invariants().ok());
}

TEST(PagedKvCache, NeverHoldsMoreBlocksThanTheSlotsCanUse) {
  // 8 slots x ceil(300 / 16) = 152 blocks; a budget of 10,000 is capped there.
  auto created = PagedKvCache::create(small_paged(16, 10000));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  PagedKvCache& cache = **created;
  EXPECT_EQ(cache.num_blocks(), 8 * 19);
  for (int s = 0; s < 8; ++s) {
    const int slot = *cache.acquire(300);
    ASSERT_TRUE(cache.ensure(slot, 300).ok());
  }
  EXPECT_EQ(cache.stats().pages_mapped, 8 * 19);
  ASSERT_TRUE(cache.check_invariants().ok());
}

TEST(PagedKvCache, RejectsBudgetsBelowOneBlockAndOddBlockSizes) {
  PagedKvCacheConfig config = small_paged(256, 1);
  config.memory_bytes -= 1;
  EXPECT_EQ(PagedKvCache::create(config).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(PagedKvCache::create(small_paged(24, 10)).status().code(),
            StatusCode::invalid_argument);
}

TEST(PagedKvCache, DataThroughBlockTablesSurvivesARandomWorkload) {
  for (const int block_size : {16, 256}) {
    const unsigned seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed) + " block " + std::to_string(block_size));
    std::mt19937 rng(seed);
    auto uniform = [&](std::int64_t lo, std::int64_t hi) {
      return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    const int blocks = block_size == 16 ? 60 : 6;
    auto created = PagedKvCache::create(small_paged(block_size, blocks));
    ASSERT_TRUE(created.ok());
    PagedKvCache& cache = **created;
    struct Seq {
      bool active = false;
      std::uint32_t tag = 0;
      std::int64_t len = 0;
    };
    std::vector<Seq> seqs(8);
    std::uint32_t next_tag = 1;
    for (int op = 0; op < 800; ++op) {
      const int s = static_cast<int>(uniform(0, 7));
      Seq& seq = seqs[s];
      if (!seq.active) {
        auto slot = cache.acquire(0);
        ASSERT_TRUE(slot.ok());
        seqs[*slot] = Seq{true, next_tag++, 0};
        continue;
      }
      if (uniform(0, 4) == 0) {
        ASSERT_EQ(paged_mismatches(cache, s, seq.tag, seq.len), 0);
        ASSERT_TRUE(cache.release(s, nullptr).ok());
        seq.active = false;
        continue;
      }
      const std::int64_t target = std::min<std::int64_t>(300, seq.len + uniform(1, 60));
      const Status status = cache.ensure(s, target);
      if (status.ok()) {
        write_paged(cache, s, seq.tag, seq.len, target);
        seq.len = target;
      } else {
        ASSERT_EQ(status.code(), StatusCode::resource_exhausted);
      }
      ASSERT_EQ(paged_mismatches(cache, s, seq.tag, seq.len), 0);
      ASSERT_TRUE(cache.check_invariants().ok());
    }
  }
}

}  // namespace
}  // namespace vpod::kvcache
