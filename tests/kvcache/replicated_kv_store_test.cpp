// ReplicatedKvStore: the KV caches of tensor-parallel ranks as one store.
// Every admission, growth, release and prefix hit lands identically in each
// rank's cache (the caches stay equal: same slots, promises, mapped pages),
// admission is refused when the caches are full, and stores that differ are
// refused at creation.
#include "kvcache/replicated_kv_store.h"

#include <gtest/gtest.h>

#include <vector>

#include "kv_test_util.h"

namespace vpod::kvcache {
namespace {

using testing::make_host_provider;
using testing::small_config;

std::vector<std::unique_ptr<KvStore>> caches(int n, std::size_t pages, bool prefix_caching) {
  std::vector<std::unique_ptr<KvStore>> out;
  for (int r = 0; r < n; ++r) {
    // 2 layers x 2 heads x 8 fp32: 128-byte tokens, 32 to a 4 KiB page (one
    // prefix block).
    KvCacheConfig config = small_config(KvLayout::all_layers, GrowthMode::background, pages);
    config.shape = KvShape{2, 2, 8, DType::f32};
    config.max_ctx = 400;
    config.prefix_caching = prefix_caching;
    config.prefix_salt = 42;
    auto cache = KvCache::create(config, make_host_provider(4096));
    EXPECT_TRUE(cache.ok()) << cache.status().to_string();
    out.push_back(std::move(cache).value());
  }
  return out;
}

// Each rank's cache as the store holds it (for comparing their state).
std::vector<const KvStore*> ranks_of(std::vector<std::unique_ptr<KvStore>>& stores) {
  std::vector<const KvStore*> out;
  for (auto& s : stores) out.push_back(s.get());
  return out;
}

void expect_equal_state(const std::vector<const KvStore*>& ranks) {
  for (std::size_t r = 1; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r]->used_units(), ranks[0]->used_units()) << "rank " << r;
    EXPECT_EQ(ranks[r]->num_free_slots(), ranks[0]->num_free_slots()) << "rank " << r;
    EXPECT_EQ(ranks[r]->stats().pages_mapped, ranks[0]->stats().pages_mapped) << "rank " << r;
    EXPECT_EQ(ranks[r]->stats().prefix_blocks_cached, ranks[0]->stats().prefix_blocks_cached);
  }
}

HybridBatch prefill(int slot, int tokens) {
  HybridBatch b;
  b.prefills.push_back({.slot = slot, .cached_len = 0, .num_new = tokens, .token_offset = 0});
  b.token_ids.assign(static_cast<std::size_t>(tokens), 1);
  for (int i = 0; i < tokens; ++i) b.positions.push_back(i);
  return b;
}

TEST(ReplicatedKvStore, EveryRanksCacheMakesTheSameDecisions) {
  auto stores = caches(2, 64, /*prefix_caching=*/true);
  const auto ranks = ranks_of(stores);
  auto created = ReplicatedKvStore::create(std::move(stores));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  ReplicatedKvStore& store = **created;
  EXPECT_EQ(store.num_ranks(), 2);
  EXPECT_NE(store.rank_view(0).contiguous[0].k, store.rank_view(1).contiguous[0].k);

  std::vector<std::int32_t> prompt(200);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int32_t>(i * 3);
  const PrefixQuery query{.tokens = prompt, .salt = 0};
  ASSERT_TRUE(store.can_allocate(200, query));
  const Allocation a = store.allocate(200, query);
  EXPECT_EQ(a.cached_tokens, 0);
  // As the scheduler does: the step's computed prompt is reported before the
  // step's prepare, which indexes it.
  store.cache_prompt(a.slot, prompt, 200);
  ASSERT_TRUE(store.prepare(prefill(a.slot, 200)).ok());
  expect_equal_state(ranks);
  EXPECT_GT(ranks[0]->stats().pages_mapped, 0);

  // The same prompt again: both caches hit the same cached blocks.
  ASSERT_TRUE(store.can_allocate(200, query));
  const Allocation b = store.allocate(200, query);
  EXPECT_NE(b.slot, a.slot);
  EXPECT_GT(b.cached_tokens, 0);
  expect_equal_state(ranks);

  EXPECT_TRUE(store.grow(a.slot, 300));
  expect_equal_state(ranks);
  // Admission refuses what the caches cannot hold, and changes nothing.
  std::int64_t used = store.used_units();
  EXPECT_FALSE(store.grow(a.slot, 100000));
  EXPECT_EQ(store.used_units(), used);
  store.free(a.slot);
  store.free(b.slot);
  expect_equal_state(ranks);
  EXPECT_EQ(store.used_units(), 0);

  // The slot verbs reach every cache too.
  auto slot = store.acquire(100);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(store.ensure(*slot, 50).ok());
  EXPECT_GE(store.backed_tokens(*slot), 50);
  const SlotTokens next[] = {{.slot = *slot, .tokens = 90}};
  auto ticket = store.prepare(next);
  ASSERT_TRUE(ticket.ok());
  ASSERT_TRUE(store.wait(*ticket).ok());
  EXPECT_GE(store.backed_tokens(*slot), 90);
  EXPECT_FALSE(store.wait(*ticket).ok());  // each ticket is waited for once
  ASSERT_TRUE(store.release(*slot, nullptr).ok());
  expect_equal_state(ranks);
}

TEST(ReplicatedKvStore, RefusesStoresThatDiffer) {
  auto stores = caches(1, 64, false);
  auto bigger = caches(1, 128, false);
  stores.push_back(std::move(bigger[0]));
  auto created = ReplicatedKvStore::create(std::move(stores));
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(created.status().message().find("ranks 0 and 1 differ"), std::string::npos)
      << created.status().to_string();
  EXPECT_FALSE(ReplicatedKvStore::create({}).ok());
}

}  // namespace
}  // namespace vpod::kvcache
