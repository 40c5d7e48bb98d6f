// Unit tests of the vAttention KV cache on the host provider (real mmap/memfd
// paging): geometry and views of both layouts, slots and best-fit reuse,
// reclamation, out-of-memory, fences, fault injection, prepare/wait.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "kv_test_util.h"

namespace vpod::kvcache {
namespace {

using testing::count_mismatches;
using testing::make_host_provider;
using testing::small_config;
using testing::write_tokens;

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::int64_t provider_pages_mapped(const KvCache& cache) {
  auto* provider = dynamic_cast<FaultInjectingProvider*>(&cache.provider());
  return provider != nullptr ? provider->ledger().pages_mapped_now : cache.stats().pages_mapped;
}

std::unique_ptr<KvCache> make_cache(const KvCacheConfig& config,
                                    std::shared_ptr<VmmProvider> provider) {
  auto cache = KvCache::create(config, std::move(provider));
  VPOD_CHECK_MSG(cache.ok(), cache.status().to_string());
  return std::move(cache).value();
}

KvCacheConfig llama3_8b(KvLayout layout, std::size_t budget) {
  KvCacheConfig config;
  config.shape = KvShape{32, 8, 128, DType::f16};
  config.layout = layout;
  config.max_slots = 2;
  config.max_ctx = 8192;
  config.memory_bytes = budget;
  config.growth = GrowthMode::synchronous;
  return config;
}

TEST(KvCacheGeometry, AllLayersBacksAOneTokenRequestWithOnePagePerKAndV) {
  auto cache =
      make_cache(llama3_8b(KvLayout::all_layers, 8 * 2 * kMiB), make_host_provider(2 * kMiB));
  EXPECT_EQ(cache->num_regions(), 2);
  EXPECT_EQ(cache->region_token_bytes(), 32u * 8 * 128 * 2);  // 64 KiB: all layers of one K
  EXPECT_EQ(cache->tokens_for_pages(1), 32);                  // 32 tokens per 2 MiB page
  auto slot = cache->acquire(1);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(cache->ensure(*slot, 1).ok());
  EXPECT_EQ(cache->slot_pages(*slot).size(), 2u);  // one K page, one V page
  EXPECT_EQ(cache->backed_tokens(*slot), 32);
  const KvStats stats = cache->stats();
  EXPECT_EQ(stats.bytes_backed, static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(stats.bytes_used, 128 * 1024);  // K+V of one token, 32 layers
  EXPECT_DOUBLE_EQ(stats.internal_fragmentation, 1.0 - 1.0 / 32.0);
}

TEST(KvCacheGeometry, PerLayerBacksAOneTokenRequestWithAPagePerLayer) {
  auto cache =
      make_cache(llama3_8b(KvLayout::per_layer, 64 * 2 * kMiB), make_host_provider(2 * kMiB));
  EXPECT_EQ(cache->num_regions(), 64);
  EXPECT_EQ(cache->tokens_for_pages(1), 1024);
  auto slot = cache->acquire(1);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(cache->ensure(*slot, 1).ok());
  EXPECT_EQ(cache->slot_pages(*slot).size(), 64u);  // 128 MiB for one token
  EXPECT_EQ(cache->backed_tokens(*slot), 1024);
  // The pool is now empty: a second request cannot start.
  auto other = cache->acquire(1);
  ASSERT_TRUE(other.ok());
  const Status status = cache->ensure(*other, 1);
  EXPECT_EQ(status.code(), StatusCode::resource_exhausted) << status.to_string();
}

TEST(KvCacheGeometry, ViewsExposeExplicitPaddedStrides) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    auto cache =
        make_cache(small_config(layout, GrowthMode::synchronous, 64), make_host_provider(4096));
    const KvShape& shape = cache->config().shape;
    // 300 tokens never fill whole pages: the slot stride is padded up.
    const std::size_t token_bytes = cache->region_token_bytes();
    EXPECT_EQ(cache->slot_bytes() % 4096, 0u);
    EXPECT_GE(cache->slot_bytes(), 300 * token_bytes);
    EXPECT_LT(cache->slot_bytes(), 300 * token_bytes + 4096);
    const KvLayerView v0 = cache->layer_view(0);
    const KvLayerView v1 = cache->layer_view(1);
    EXPECT_EQ(v0.slot_stride * 4, static_cast<std::int64_t>(cache->slot_bytes()));
    EXPECT_EQ(v0.head_stride, shape.head_dim);
    EXPECT_EQ(v0.num_slots, 8);
    EXPECT_EQ(v0.max_ctx, 300);
    EXPECT_EQ(v0.device, Device::cpu);
    if (layout == KvLayout::all_layers) {
      EXPECT_EQ(v0.token_stride, 3 * 2 * 8);
      EXPECT_EQ(static_cast<float*>(v1.k) - static_cast<float*>(v0.k), 2 * 8);
    } else {
      EXPECT_EQ(v0.token_stride, 2 * 8);
      EXPECT_EQ(static_cast<std::byte*>(v1.k) - static_cast<std::byte*>(v0.k),
                static_cast<std::ptrdiff_t>(2 * 8 * cache->slot_bytes()));
    }
  }
}

TEST(KvCacheGeometry, TheStoreViewHoldsEveryLayersView) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    auto cache =
        make_cache(small_config(layout, GrowthMode::synchronous, 64), make_host_provider(4096));
    const KvCacheView view = cache->view();
    EXPECT_FALSE(view.is_paged());
    ASSERT_EQ(view.num_layers(), cache->config().shape.num_layers);
    for (int l = 0; l < view.num_layers(); ++l) {
      const KvLayerView expected = cache->layer_view(l);
      EXPECT_EQ(view.contiguous[l].k, expected.k);
      EXPECT_EQ(view.contiguous[l].v, expected.v);
      EXPECT_EQ(view.contiguous[l].token_stride, expected.token_stride);
      EXPECT_EQ(view.contiguous[l].slot_stride, expected.slot_stride);
    }
  }
}

TEST(KvCacheConfigTest, RejectsBadConfigurations) {
  auto provider = make_host_provider(4096);
  KvCacheConfig config = small_config(KvLayout::all_layers, GrowthMode::synchronous, 64);
  config.max_slots = 0;
  EXPECT_EQ(KvCache::create(config, provider).status().code(), StatusCode::invalid_argument);
  config = small_config(KvLayout::all_layers, GrowthMode::synchronous, 1);  // < 2 pages
  EXPECT_EQ(KvCache::create(config, provider).status().code(), StatusCode::invalid_argument);
  config = small_config(KvLayout::all_layers, GrowthMode::synchronous, 64);
  config.shape.head_dim = 0;
  EXPECT_EQ(KvCache::create(config, provider).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(parse_kv_layout("per-layer").value(), KvLayout::per_layer);
  EXPECT_FALSE(parse_kv_layout("paged").ok());
}

TEST(KvCacheConfigTest, PoolNeverExceedsWhatTheSlotsCanMap) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    // 8 slots x 300 tokens; a budget of 100,000 pages is far more than that.
    auto cache =
        make_cache(small_config(layout, GrowthMode::synchronous, 100000), make_host_provider(4096));
    const std::int64_t full_depth = cache->pages_for_tokens(300);
    EXPECT_EQ(cache->stats().pages_total, cache->num_regions() * 8 * full_depth);
    // Every slot can still be backed to max_ctx at once.
    for (int s = 0; s < 8; ++s) {
      const int slot = *cache->acquire(300);
      ASSERT_TRUE(cache->ensure(slot, 300).ok());
    }
    EXPECT_EQ(cache->free_tokens(), 0);
    ASSERT_TRUE(cache->check_invariants().ok());
  }
}

TEST(KvCacheSlots, EnsureGrowsAndDataSurvivesGrowth) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    auto cache =
        make_cache(small_config(layout, GrowthMode::synchronous, 128), make_host_provider(4096));
    auto slot = cache->acquire(10);
    ASSERT_TRUE(slot.ok());
    EXPECT_EQ(cache->backed_tokens(*slot), 0);
    ASSERT_TRUE(cache->ensure(*slot, 10).ok());
    EXPECT_GE(cache->backed_tokens(*slot), 10);
    write_tokens(*cache, *slot, 7, 0, 10);
    ASSERT_TRUE(cache->ensure(*slot, 250).ok());
    EXPECT_EQ(count_mismatches(*cache, *slot, 7, 0, 10), 0);
    write_tokens(*cache, *slot, 7, 10, 250);
    EXPECT_EQ(count_mismatches(*cache, *slot, 7, 0, 250), 0);
    EXPECT_EQ(cache->slot_depth(*slot), cache->pages_for_tokens(250));
    ASSERT_TRUE(cache->check_invariants().ok());
  }
}

TEST(KvCacheSlots, ArgumentErrorsAreStatuses) {
  auto cache = make_cache(small_config(KvLayout::all_layers, GrowthMode::synchronous, 64),
                          make_host_provider(4096));
  EXPECT_EQ(cache->ensure(0, 5).code(), StatusCode::failed_precondition);  // not acquired
  EXPECT_EQ(cache->ensure(9, 5).code(), StatusCode::out_of_range);
  EXPECT_EQ(cache->release(0, nullptr).code(), StatusCode::failed_precondition);
  EXPECT_EQ(cache->acquire(301).status().code(), StatusCode::out_of_range);
  auto slot = cache->acquire(0);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(cache->ensure(*slot, 301).code(), StatusCode::out_of_range);
  const SlotTokens bad[] = {{*slot, 5}, {(*slot + 1) % 8, 5}};
  EXPECT_EQ(cache->prepare(bad).status().code(), StatusCode::failed_precondition);
  EXPECT_EQ(cache->backed_tokens(*slot), 0);  // nothing of the bad prepare happened
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(cache->acquire(0).ok());
  EXPECT_EQ(cache->acquire(0).status().code(), StatusCode::resource_exhausted);
  EXPECT_EQ(cache->num_free_slots(), 0);
}

TEST(KvCacheSlots, AcquirePicksTheBestFitAndReusesPagesAndData) {
  auto cache = make_cache(small_config(KvLayout::all_layers, GrowthMode::synchronous, 256),
                          make_host_provider(4096));
  // Three slots of 30, 120 and 250 tokens.
  const std::int64_t lengths[3] = {30, 120, 250};
  int slots[3];
  std::vector<PageId> pages[3];
  for (int i = 0; i < 3; ++i) {
    slots[i] = *cache->acquire(lengths[i]);
    ASSERT_TRUE(cache->ensure(slots[i], lengths[i]).ok());
    write_tokens(*cache, slots[i], 100 + i, 0, lengths[i]);
    pages[i] = cache->slot_pages(slots[i]);
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache->release(slots[i], nullptr).ok());
  const KvStats idle = cache->stats();
  EXPECT_EQ(idle.pages_idle, idle.pages_mapped);  // deferred: still mapped
  EXPECT_GT(idle.pages_idle, 0);

  // 100 tokens: the 120-token slot covers it with the least surplus.
  auto a = cache->acquire(100);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, slots[1]);
  EXPECT_EQ(cache->slot_pages(*a), pages[1]);               // same physical pages
  EXPECT_EQ(count_mismatches(*cache, *a, 101, 0, 120), 0);  // and their data
  const std::int64_t mapped_before = cache->stats().pages_mapped_total;
  ASSERT_TRUE(cache->ensure(*a, 100).ok());
  EXPECT_EQ(cache->stats().pages_mapped_total, mapped_before);  // no driver call
  // 260 tokens: nothing covers it; the 250-token slot is the smallest shortfall.
  auto b = cache->acquire(260);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, slots[2]);
  // 0 tokens: a slot with nothing mapped, keeping mapped pages for others.
  auto c = cache->acquire(0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(cache->slot_depth(*c), 0);
  ASSERT_TRUE(cache->check_invariants().ok());
}

TEST(KvCacheReclaim, EmptyPoolTakesIdleTailsLargestFirst) {
  // 40 pages: two slots of 300 tokens (15 pages per region, 30 per slot) do
  // not fit together.
  auto provider = make_host_provider(4096);
  auto cache =
      make_cache(small_config(KvLayout::all_layers, GrowthMode::synchronous, 40), provider);
  const int a = *cache->acquire(300);
  ASSERT_TRUE(cache->ensure(a, 300).ok());
  write_tokens(*cache, a, 1, 0, 300);
  const int small = *cache->acquire(20);
  ASSERT_TRUE(cache->ensure(small, 20).ok());
  EXPECT_EQ(cache->stats().pages_free, 40 - 30 - 2);  // 20 tokens: one page per region
  ASSERT_TRUE(cache->release(a, nullptr).ok());
  ASSERT_TRUE(cache->release(small, nullptr).ok());
  EXPECT_EQ(cache->free_tokens(), cache->tokens_for_pages(20));
  EXPECT_EQ(cache->capacity_tokens(), cache->tokens_for_pages(20));

  const int b = *cache->acquire(0);  // a slot with nothing mapped
  EXPECT_NE(b, a);
  EXPECT_NE(b, small);
  EXPECT_EQ(cache->capacity_tokens(b), 300);  // 20 pages per region would hold 426
  EXPECT_EQ(cache->capacity_tokens(), cache->tokens_for_pages(20));

  // 30 pages needed, 8 free: 11 depth steps come off the tail of the larger
  // idle slot; the small one keeps its page.
  ASSERT_TRUE(cache->ensure(b, 300).ok());
  EXPECT_EQ(cache->slot_depth(a), 4);
  EXPECT_EQ(cache->slot_depth(small), 1);
  EXPECT_EQ(cache->stats().pages_reclaimed, 22);
  EXPECT_EQ(count_mismatches(*cache, a, 1, 0, cache->backed_tokens(a)), 0);  // head intact
  ASSERT_TRUE(cache->check_invariants().ok());

  // Not enough even with every idle page: a status, and nothing changes.
  const int c = *cache->acquire(0);
  const Status status = cache->ensure(c, 300);
  EXPECT_EQ(status.code(), StatusCode::resource_exhausted);
  EXPECT_NE(status.message().find("reclaimable from idle slots"), std::string::npos)
      << status.to_string();
  EXPECT_EQ(cache->slot_depth(a), 4);
  EXPECT_EQ(cache->slot_depth(c), 0);
  EXPECT_EQ(provider_pages_mapped(*cache), cache->stats().pages_mapped);
  ASSERT_TRUE(cache->check_invariants().ok());

  // Explicit trim returns idle pages to the pool.
  auto trimmed = cache->reclaim_idle(1000);
  ASSERT_TRUE(trimmed.ok());
  EXPECT_EQ(*trimmed, 10);
  EXPECT_EQ(cache->stats().pages_free, 10);
}

TEST(KvCacheReclaim, EagerModeUnmapsOnRelease) {
  KvCacheConfig config = small_config(KvLayout::per_layer, GrowthMode::synchronous, 64);
  config.reclaim = ReclaimPolicy::eager;
  auto cache = make_cache(config, make_host_provider(4096));
  const int s = *cache->acquire(200);
  ASSERT_TRUE(cache->ensure(s, 200).ok());
  EXPECT_EQ(cache->stats().pages_free, 64 - 4 * 6);
  ASSERT_TRUE(cache->release(s, nullptr).ok());
  const KvStats stats = cache->stats();
  EXPECT_EQ(stats.pages_free, 64);
  EXPECT_EQ(stats.pages_unmapped_total, 24);
  EXPECT_EQ(cache->slot_depth(s), 0);
  ASSERT_TRUE(cache->check_invariants().ok());
}

TEST(KvCacheFence, IdlePagesAreNotUnmappedBeforeTheirReadersFinish) {
  auto inner = make_host_provider(4096);
  auto provider = std::make_shared<FaultInjectingProvider>(inner);
  auto cache =
      make_cache(small_config(KvLayout::all_layers, GrowthMode::synchronous, 30), provider);
  const int a = *cache->acquire(300);
  ASSERT_TRUE(cache->ensure(a, 300).ok());  // the whole pool
  provider->set_fences_gated(true);         // "a kernel still reads slot a"
  ASSERT_TRUE(cache->release(a, nullptr).ok());
  provider->set_fences_gated(false);
  const int b = *cache->acquire(0);
  const std::int64_t unmaps_before = provider->ledger().unmap_calls;
  auto grown = std::async(std::launch::async, [&] { return cache->ensure(b, 100); });
  EXPECT_EQ(grown.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  EXPECT_EQ(provider->ledger().unmap_calls, unmaps_before);  // nothing unmapped yet
  EXPECT_EQ(provider->ledger().fence_waits_blocked, 1);
  provider->open_fences();  // "the kernel finished"
  ASSERT_TRUE(grown.get().ok());
  EXPECT_GT(provider->ledger().unmap_calls, unmaps_before);
  EXPECT_GE(cache->backed_tokens(b), 100);
  ASSERT_TRUE(cache->check_invariants().ok());
}

TEST(KvCacheFaults, FailedGrowRollsBackEveryRegion) {
  auto inner = make_host_provider(4096);
  auto provider = std::make_shared<FaultInjectingProvider>(inner);
  // per-layer: 6 regions, so one grow is 6 map calls; fail the 4th.
  auto cache = make_cache(small_config(KvLayout::per_layer, GrowthMode::synchronous, 60), provider);
  const int s = *cache->acquire(300);
  ASSERT_TRUE(cache->ensure(s, 64).ok());
  write_tokens(*cache, s, 5, 0, 64);
  const KvStats before = cache->stats();
  const FaultInjectingProvider::Ledger ledger_before = provider->ledger();
  provider->fail_map_call(4);
  const Status status = cache->ensure(s, 200);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("injected fault"), std::string::npos) << status.to_string();
  EXPECT_NE(status.message().find("growing KV slot"), std::string::npos) << status.to_string();
  const KvStats after = cache->stats();
  EXPECT_EQ(after.pages_free, before.pages_free);
  EXPECT_EQ(cache->backed_tokens(s), 64);
  EXPECT_EQ(provider->ledger().pages_mapped_now, ledger_before.pages_mapped_now);
  EXPECT_EQ(provider->ledger().double_maps, 0);
  EXPECT_EQ(provider->ledger().shared_maps, 0);  // no prefix caching: no page shared
  ASSERT_TRUE(cache->check_invariants().ok());
  EXPECT_EQ(count_mismatches(*cache, s, 5, 0, 64), 0);
  ASSERT_TRUE(cache->ensure(s, 200).ok());  // the fault was one-shot
  EXPECT_EQ(count_mismatches(*cache, s, 5, 0, 64), 0);
}

TEST(KvCachePrepare, BackgroundWaitReturnsOnceTokensAreBacked) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    KvCacheConfig config = small_config(layout, GrowthMode::background, 200);
    config.lookahead_tokens = 40;
    auto cache = make_cache(config, make_host_provider(4096));
    const int a = *cache->acquire(50);
    const int b = *cache->acquire(50);
    const SlotTokens next[] = {{a, 50}, {b, 10}};
    auto ticket = cache->prepare(next);
    ASSERT_TRUE(ticket.ok());
    EXPECT_GT(*ticket, 0u);
    ASSERT_TRUE(cache->wait(*ticket).ok());
    EXPECT_GE(cache->backed_tokens(a), 50);
    EXPECT_GE(cache->backed_tokens(b), 10);
    cache->drain();  // lookahead done too
    EXPECT_GE(cache->backed_tokens(a), 90);
    EXPECT_GE(cache->backed_tokens(b), 50);
    // Already backed: nothing to hand over, nothing to wait for.
    const SlotTokens again[] = {{a, 51}};
    EXPECT_EQ(*cache->prepare(again), 0u);
    EXPECT_EQ(cache->stats().tokens_used, 51 + 10);
    EXPECT_EQ(cache->wait(12345).code(), StatusCode::invalid_argument);
    ASSERT_TRUE(cache->check_invariants().ok());
  }
}

TEST(KvCachePrepare, AheadTargetsAreMappedInTheBackgroundAndNeverWaitedFor) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    KvCacheConfig config = small_config(layout, GrowthMode::background, 200);
    config.lookahead_tokens = 10;
    auto cache = make_cache(config, make_host_provider(4096));
    const int a = *cache->acquire(300);
    const int b = *cache->acquire(20);
    // a: a 64-token prefill chunk whose prompt continues to 128; b: a decode.
    const SlotTokens next[] = {{a, 64, 128}, {b, 20}};
    auto ticket = cache->prepare(next);
    ASSERT_TRUE(ticket.ok());
    ASSERT_TRUE(cache->wait(*ticket).ok());
    EXPECT_GE(cache->backed_tokens(a), 64);
    cache->drain();
    EXPECT_GE(cache->backed_tokens(a), 128);         // the next chunk, mapped ahead
    EXPECT_LT(cache->backed_tokens(b), 128);         // lookahead only
    EXPECT_EQ(cache->stats().tokens_used, 64 + 20);  // ahead is not "used"
    // The next chunk's prepare finds it backed: no ticket, no wait.
    const SlotTokens chunk2[] = {{a, 128, 192}};
    EXPECT_EQ(*cache->prepare(chunk2), 0u);
    // An ahead target below tokens + lookahead changes nothing.
    const SlotTokens small[] = {{b, 21, 5}};
    ASSERT_TRUE(cache->prepare(small).ok());
    cache->drain();
    ASSERT_TRUE(cache->check_invariants().ok());
  }
}

TEST(KvCachePrepare, SynchronousModeMapsOnDemandIgnoringAhead) {
  KvCacheConfig config = small_config(KvLayout::all_layers, GrowthMode::synchronous, 200);
  auto cache = make_cache(config, make_host_provider(4096));
  const int a = *cache->acquire(300);
  const SlotTokens next[] = {{a, 40, 400}};
  ASSERT_EQ(*cache->prepare(next), 0u);
  EXPECT_GE(cache->backed_tokens(a), 40);
  EXPECT_LT(cache->backed_tokens(a), 400);
}

TEST(KvCachePrepare, SynchronousModeMapsInsidePrepare) {
  KvCacheConfig config = small_config(KvLayout::all_layers, GrowthMode::synchronous, 200);
  config.lookahead_tokens = 30;
  auto cache = make_cache(config, make_host_provider(4096));
  const int a = *cache->acquire(50);
  const SlotTokens next[] = {{a, 50}};
  auto ticket = cache->prepare(next);
  ASSERT_TRUE(ticket.ok());
  EXPECT_EQ(*ticket, 0u);
  EXPECT_GE(cache->backed_tokens(a), 80);
}

TEST(KvCachePrepare, MappingFailureReachesTheWaiterAndOnlyThatTicket) {
  auto inner = make_host_provider(4096);
  auto provider = std::make_shared<FaultInjectingProvider>(inner);
  // 20 pages: slot a takes 4, slot b's 300 tokens (30 pages) cannot fit.
  auto cache = make_cache(small_config(KvLayout::all_layers, GrowthMode::background, 20), provider);
  const int a = *cache->acquire(100);
  provider->fail_map_call(1);
  const SlotTokens first[] = {{a, 40}};
  auto t1 = cache->prepare(first);
  ASSERT_TRUE(t1.ok());
  const Status failed = cache->wait(*t1);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("injected fault"), std::string::npos) << failed.to_string();
  EXPECT_EQ(cache->backed_tokens(a), 0);
  auto t2 = cache->prepare(first);
  ASSERT_TRUE(t2.ok());
  EXPECT_TRUE(cache->wait(*t2).ok());
  EXPECT_GE(cache->backed_tokens(a), 40);
  // Out of memory through the mapper: a resource_exhausted status.
  const int b = *cache->acquire(300);
  const SlotTokens big[] = {{b, 300}};
  auto t3 = cache->prepare(big);
  ASSERT_TRUE(t3.ok());
  EXPECT_EQ(cache->wait(*t3).code(), StatusCode::resource_exhausted);
  ASSERT_TRUE(cache->check_invariants().ok());
}

TEST(KvCachePrepare, GrowthPostedByAReleasedSlotsOwnerNeverReachesItsNextOwner) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  KvCacheConfig config = small_config(KvLayout::all_layers, GrowthMode::background, 40);
  config.max_slots = 3;
  auto cache = make_cache(config, provider);
  const std::int64_t page_tokens = cache->tokens_for_pages(1);
  ASSERT_GT(page_tokens, 0);
  const int a = *cache->acquire(8 * page_tokens);
  const int x = *cache->acquire(300);
  const int s = *cache->acquire(10);
  // X: an idle slot holding most of the pool behind a fence that stays closed.
  ASSERT_TRUE(cache->ensure(x, 300).ok());
  // S: the slot whose owner changes; one depth step mapped.
  ASSERT_TRUE(cache->ensure(s, 10).ok());
  provider->set_fences_gated(true);
  ASSERT_TRUE(cache->release(x, nullptr).ok());
  // A's growth must reclaim from X, so the mapper blocks on X's fence.
  const SlotTokens grow_a[] = {{a, 8 * page_tokens}};
  auto t1 = cache->prepare(grow_a);
  ASSERT_TRUE(t1.ok());
  for (int i = 0; i < 2000 && provider->ledger().fence_waits_blocked == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(provider->ledger().fence_waits_blocked, 0) << "the mapper never reached the fence";
  // S's owner asks for a lot, then leaves before the mapper gets to it...
  const SlotTokens grow_s[] = {{s, 150}};
  ASSERT_TRUE(cache->prepare(grow_s).ok());
  ASSERT_TRUE(cache->release(s, nullptr).ok());
  // ...and a small request gets S (best fit: it already backs 10 tokens).
  ASSERT_EQ(*cache->acquire(10), s);
  provider->open_fences();
  provider->set_fences_gated(false);
  ASSERT_TRUE(cache->wait(*t1).ok());
  cache->drain();
  EXPECT_EQ(cache->backed_tokens(s), page_tokens) << "the old owner's growth reached the new one";
  // The new owner's own growth still works.
  const SlotTokens grow_new[] = {{s, 40}};
  auto t3 = cache->prepare(grow_new);
  ASSERT_TRUE(t3.ok());
  ASSERT_TRUE(cache->wait(*t3).ok());
  EXPECT_GE(cache->backed_tokens(s), 40);
  ASSERT_TRUE(cache->check_invariants().ok());
  EXPECT_EQ(provider->ledger().double_maps, 0);
  EXPECT_EQ(provider->ledger().shared_maps, 0);  // no prefix caching: no page shared
}

// ----------------------------------------------------------------------------
// Eager allocation for the next request (expect_acquire)
// ----------------------------------------------------------------------------
std::vector<std::int64_t> depths(const KvCache& cache) {
  std::vector<std::int64_t> out;
  for (int s = 0; s < cache.config().max_slots; ++s) out.push_back(cache.slot_depth(s));
  return out;
}

TEST(KvCachePrewarm, MapsTheSlotTheNextAcquirePicksAndThatAcquireUsesIt) {
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    SCOPED_TRACE(std::string(kv_layout_name(layout)));
    auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
    auto cache = make_cache(small_config(layout, GrowthMode::background, 200), provider);
    const int regions = cache->num_regions();
    // An idle slot holding one depth step: the best fit (smallest shortfall)
    // for a 200-token request, so that is the slot to pre-map.
    const int old = *cache->acquire(10);
    ASSERT_TRUE(cache->ensure(old, 10).ok());
    ASSERT_TRUE(cache->release(old, nullptr).ok());
    const std::vector<PageId> old_pages = cache->slot_pages(old);
    const std::vector<std::int64_t> before = depths(*cache);
    const KvStats stats_before = cache->stats();

    cache->expect_acquire(200, 100);
    cache->drain();
    const std::int64_t want = cache->pages_for_tokens(100);
    const std::vector<std::int64_t> after = depths(*cache);
    for (int s = 0; s < cache->config().max_slots; ++s) {
      EXPECT_EQ(after[s], s == old ? want : before[s]) << "slot " << s;
    }
    EXPECT_EQ(cache->prewarm_stats().pages, (want - before[old]) * regions);
    const KvStats idle = cache->stats();
    EXPECT_EQ(idle.active_slots, 0);
    EXPECT_EQ(idle.pages_idle, want * regions);  // held by a free slot
    EXPECT_EQ(idle.pages_free, stats_before.pages_free - (want - before[old]) * regions);
    EXPECT_EQ(idle.pages_reclaimed, 0);
    // The slot's first pages are still its own (appended to, not replaced).
    const std::vector<PageId> grown = cache->slot_pages(old);
    for (int r = 0; r < regions; ++r) EXPECT_EQ(grown[r * want], old_pages[r]);

    // The admission gets that slot and its first chunk needs no mapping.
    ASSERT_EQ(*cache->acquire(200), old);
    EXPECT_EQ(cache->prewarm_stats().hits, 1);
    const SlotTokens first_chunk[] = {{old, 100, 200}};
    EXPECT_EQ(*cache->prepare(first_chunk), 0u);  // nothing to wait for
    write_tokens(*cache, old, 7, 0, 100);
    EXPECT_EQ(count_mismatches(*cache, old, 7, 0, 100), 0);
    cache->drain();
    EXPECT_GE(cache->backed_tokens(old), 200);  // the next chunk, ahead
    EXPECT_EQ(provider->ledger().double_maps, 0);
    EXPECT_EQ(provider->ledger().shared_maps, 0);  // no prefix caching: no page shared
    EXPECT_EQ(provider->ledger().pages_mapped_now, cache->stats().pages_mapped);
    ASSERT_TRUE(cache->check_invariants().ok());

    // Never deeper than the hinted request itself; 0 tokens: no hint.
    cache->expect_acquire(20, 100);
    cache->drain();
    for (int s = 0; s < cache->config().max_slots; ++s) {
      if (s != old) {
        EXPECT_LE(cache->slot_depth(s), cache->pages_for_tokens(20));
      }
    }
    const std::int64_t mapped = cache->stats().pages_mapped_total;
    cache->expect_acquire(300, 0);
    cache->drain();
    EXPECT_EQ(cache->stats().pages_mapped_total, mapped);
  }
}

TEST(KvCachePrewarm, TakesOnlyFreePoolPagesAndTheyStayReclaimable) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  // 40 pages: a holds 30, y idles on 2, 8 are free.
  auto cache = make_cache(small_config(KvLayout::all_layers, GrowthMode::background, 40), provider);
  const int a = *cache->acquire(300);
  ASSERT_TRUE(cache->ensure(a, 300).ok());
  const int y = *cache->acquire(20);
  ASSERT_TRUE(cache->ensure(y, 20).ok());
  ASSERT_TRUE(cache->release(y, nullptr).ok());
  ASSERT_EQ(cache->stats().pages_free, 8);

  // A 300-token request's first 300 tokens would need 28 more pages in y.
  cache->expect_acquire(300, 300);
  cache->drain();
  EXPECT_EQ(cache->slot_depth(y), 1 + 4);  // the 8 free pages, no more
  EXPECT_EQ(cache->stats().pages_free, 0);
  EXPECT_EQ(cache->stats().pages_reclaimed, 0);  // never reclaims
  EXPECT_EQ(cache->slot_depth(a), 15);
  EXPECT_EQ(cache->prewarm_stats().pages, 8);
  EXPECT_EQ(cache->free_tokens(), cache->tokens_for_pages(5));  // held, not promised

  // Someone else's growth takes them back like any idle slot's pages.
  const int b = *cache->acquire(0);
  EXPECT_NE(b, y);
  ASSERT_TRUE(cache->ensure(b, 100).ok());  // 5 depth steps
  EXPECT_EQ(cache->slot_depth(y), 0);
  EXPECT_EQ(cache->stats().pages_reclaimed, 10);
  EXPECT_EQ(provider->ledger().pages_mapped_now, cache->stats().pages_mapped);
  ASSERT_TRUE(cache->check_invariants().ok());
}

TEST(KvCachePrewarm, AnAcquireDuringAChunkNeverGetsItsPages) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache =
      make_cache(small_config(KvLayout::all_layers, GrowthMode::background, 200), provider);
  provider->gate_next_map();
  cache->expect_acquire(300, 300);
  ASSERT_TRUE(provider->wait_map_gated(std::chrono::seconds(5))) << "no pre-mapping started";
  // The mapper is inside a chunk for the slot acquire(300) picks: take it.
  const int s = *cache->acquire(300);
  EXPECT_EQ(cache->slot_depth(s), 0);
  provider->open_map();
  cache->settle_prewarm();
  // The chunk is unmapped again instead of landing on the new owner.
  EXPECT_EQ(cache->slot_depth(s), 0);
  EXPECT_EQ(cache->backed_tokens(s), 0);
  EXPECT_EQ(cache->prewarm_stats().hits, 0);
  EXPECT_GT(cache->stats().pages_unmapped_total, 0);
  EXPECT_EQ(provider->ledger().pages_mapped_now, cache->stats().pages_mapped);
  ASSERT_TRUE(cache->check_invariants().ok());
  // Its own growth works as usual.
  const SlotTokens mine[] = {{s, 50}};
  auto ticket = cache->prepare(mine);
  ASSERT_TRUE(ticket.ok());
  ASSERT_TRUE(cache->wait(*ticket).ok());
  EXPECT_GE(cache->backed_tokens(s), 50);
  cache->drain();
  ASSERT_TRUE(cache->check_invariants().ok());
  EXPECT_EQ(provider->ledger().double_maps, 0);
  EXPECT_EQ(provider->ledger().shared_maps, 0);  // no prefix caching: no page shared
}

TEST(KvCachePrewarm, SettleWaitsForTheChunkInFlightThenFreeSlotsStayPut) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache =
      make_cache(small_config(KvLayout::all_layers, GrowthMode::background, 200), provider);
  provider->gate_next_map();
  cache->expect_acquire(300, 300);
  ASSERT_TRUE(provider->wait_map_gated(std::chrono::seconds(5)));
  auto settled = std::async(std::launch::async, [&] { cache->settle_prewarm(); });
  EXPECT_EQ(settled.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  provider->open_map();
  settled.get();
  // The chunk in flight landed (its slot is still free); nothing more follows.
  const std::vector<std::int64_t> now = depths(*cache);
  const std::int64_t chunk = KvCache::kPrewarmChunkPages / cache->num_regions();
  EXPECT_EQ(*std::max_element(now.begin(), now.end()), chunk);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache->drain();
  EXPECT_EQ(depths(*cache), now);
  EXPECT_EQ(cache->prewarm_stats().pages, KvCache::kPrewarmChunkPages);
  ASSERT_TRUE(cache->check_invariants().ok());
}

TEST(KvCachePrewarm, SynchronousModeIgnoresTheHint) {
  auto cache = make_cache(small_config(KvLayout::all_layers, GrowthMode::synchronous, 200),
                          make_host_provider(4096));
  cache->expect_acquire(300, 300);
  cache->settle_prewarm();
  cache->drain();
  EXPECT_EQ(cache->stats().pages_mapped, 0);
  EXPECT_EQ(cache->prewarm_stats().pages, 0);
}

TEST(KvCachePrewarm, EagerAllocationOffIgnoresTheHint) {
  KvCacheConfig config = small_config(KvLayout::all_layers, GrowthMode::background, 200);
  config.eager_allocation = false;
  auto cache = make_cache(config, make_host_provider(4096));
  cache->expect_acquire(300, 300);
  cache->drain();
  cache->settle_prewarm();
  EXPECT_EQ(cache->stats().pages_mapped, 0);
  EXPECT_EQ(cache->prewarm_stats().pages, 0);
  // The same hint with eager allocation on maps pages (so the check above can fail).
  auto eager = make_cache(small_config(KvLayout::all_layers, GrowthMode::background, 200),
                          make_host_provider(4096));
  eager->expect_acquire(300, 300);
  eager->drain();
  eager->settle_prewarm();
  EXPECT_GT(eager->prewarm_stats().pages, 0);
}

TEST(KvCachePrepare, LookaheadInFlightWhenTheSlotIsReleasedNeverRaisesItsHeldDepth) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache =
      make_cache(small_config(KvLayout::all_layers, GrowthMode::background, 200), provider);
  const int a = *cache->acquire(300);
  ASSERT_TRUE(cache->ensure(a, 20).ok());
  const std::int64_t depth = cache->slot_depth(a);
  provider->gate_next_map();
  const SlotTokens next[] = {{a, 20, 250}};  // backed; 250 ahead
  EXPECT_EQ(*cache->prepare(next), 0u);
  ASSERT_TRUE(provider->wait_map_gated(std::chrono::seconds(5)));
  ASSERT_TRUE(cache->release(a, nullptr).ok());
  provider->open_map();
  cache->drain();
  // Admission budgeted for what the released slot held; nothing lands later.
  EXPECT_EQ(cache->slot_depth(a), depth);
  EXPECT_EQ(provider->ledger().pages_mapped_now, cache->stats().pages_mapped);
  ASSERT_TRUE(cache->check_invariants().ok());
}

}  // namespace
}  // namespace vpod::kvcache
