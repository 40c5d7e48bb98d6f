// Prefix caching in the vAttention cache, on the host provider (memfd pages
// mapped at several addresses, as cuMemMap maps one allocation twice), driven
// through KvCapacity's verbs as the engine drives them. K/V written at a
// position is a function of the tokens up to it (and the salt), so a request
// that starts with another's blocks must read back exactly what that other
// request wrote, through its own contiguous view, and nothing a later owner
// writes may change what a sharer reads. Seeds are printed (VPOD_TEST_SEED).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/hybrid_batch.h"
#include "common/splitmix64.h"
#include "kv_test_util.h"

namespace vpod::kvcache {
namespace {

using testing::element;
using testing::make_host_provider;
using testing::pattern;

unsigned test_seed() {
  if (const char* env = std::getenv("VPOD_TEST_SEED"))
    return static_cast<unsigned>(std::stoul(env));
  return std::random_device{}();
}

// fp32, 2 layers x 2 heads x 8: an all-layers token is 128 bytes, so a 4 KiB
// page (one block) holds 32 tokens; per-layer, 64 bytes and 64 tokens.
KvCacheConfig prefix_config(KvLayout layout, GrowthMode growth, std::size_t pages) {
  KvCacheConfig config;
  config.shape = KvShape{2, 2, 8, DType::f32};
  config.layout = layout;
  config.max_slots = 6;
  config.max_ctx = 400;
  config.memory_bytes = pages * 4096;
  config.growth = growth;
  config.prefix_caching = true;
  config.prefix_salt = 42;
  return config;
}

// The tag of position p: the chain of every token up to p and the salt.
std::vector<std::uint32_t> tags_of(const std::vector<std::int32_t>& tokens, std::uint64_t salt) {
  std::vector<std::uint32_t> tags(tokens.size());
  std::uint64_t h = splitmix64(salt);
  for (std::size_t p = 0; p < tokens.size(); ++p) {
    h = splitmix64(h ^ static_cast<std::uint32_t>(tokens[p]));
    tags[p] = static_cast<std::uint32_t>(h);
  }
  return tags;
}

// "Computes" positions [begin, end): what a model's KV append would write.
void compute(const KvCache& cache, int slot, const std::vector<std::uint32_t>& tags,
             std::int64_t begin, std::int64_t end) {
  const KvShape& shape = cache.config().shape;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const KvLayerView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv)
      for (std::int64_t t = begin; t < end; ++t)
        for (int h = 0; h < shape.num_kv_heads; ++h)
          for (int d = 0; d < shape.head_dim; ++d)
            *element(view, kv, slot, t, h, d) = pattern(tags[t], layer, kv, t, h, d);
  }
}

std::int64_t mismatches(const KvCache& cache, int slot, const std::vector<std::uint32_t>& tags,
                        std::int64_t end) {
  const KvShape& shape = cache.config().shape;
  std::int64_t bad = 0;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const KvLayerView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv)
      for (std::int64_t t = 0; t < end; ++t)
        for (int h = 0; h < shape.num_kv_heads; ++h)
          for (int d = 0; d < shape.head_dim; ++d)
            bad += *element(view, kv, slot, t, h, d) != pattern(tags[t], layer, kv, t, h, d);
  }
  return bad;
}

// One request as the engine runs it: admitted with a prefix query, prefilled
// in chunks (cache_prompt reported before each step's prepare), then decoded.
struct Req {
  std::vector<std::int32_t> tokens;  // prompt, then generated
  int prompt = 0;
  std::uint64_t salt = 0;
  int slot = -1;
  int computed = 0;
  int cached = 0;
  int target = 0;  // total tokens when it finishes
  std::vector<std::uint32_t> tags;
};

// Runs one step over `reqs` (each computes up to `chunk` tokens or decodes
// one), as Scheduler + KvCache::prepare + the forward would. Returns the
// prepare Status.
Status step(KvCache& cache, std::vector<Req*>& reqs, int chunk) {
  HybridBatch batch;
  std::vector<int> news;
  for (Req* r : reqs) {
    const int n = r->computed < r->prompt ? std::min(chunk, r->prompt - r->computed) : 1;
    if (!cache.grow(r->slot, r->computed + n)) return resource_exhausted("grow refused");
    BatchSequence s{.slot = r->slot, .cached_len = r->computed, .num_new = n};
    (r->computed < r->prompt ? batch.prefills : batch.decodes).push_back(s);
    news.push_back(n);
    if (r->computed < r->prompt)
      cache.cache_prompt(r->slot, {r->tokens.data(), static_cast<std::size_t>(r->prompt)},
                         std::min(r->prompt, r->computed + n));
  }
  VPOD_RETURN_IF_ERROR(cache.prepare(batch));
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    Req* r = reqs[i];
    const int end = r->computed + news[i];
    EXPECT_GE(cache.backed_tokens(r->slot), end);
    if (end > static_cast<int>(r->tokens.size())) r->tokens.push_back(r->tokens.back() * 31 + 7);
    r->tags = tags_of(r->tokens, r->salt);
    compute(cache, r->slot, r->tags, r->computed, end);
    r->computed = end;
  }
  return {};
}

Req make_req(std::vector<std::int32_t> prompt, std::uint64_t salt, int extra) {
  Req r;
  r.prompt = static_cast<int>(prompt.size());
  r.tokens = std::move(prompt);
  r.tokens.reserve(r.tokens.size() + extra + 1);
  r.salt = salt;
  r.target = r.prompt + extra;
  r.tags = tags_of(r.tokens, salt);
  return r;
}

std::vector<std::int32_t> seq(int n, int seed) {
  std::vector<std::int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>(splitmix64(seed * 1000 + i) % 5000);
  return t;
}

void admit(KvCache& cache, Req& r) {
  const PrefixQuery q{r.tokens, r.salt};
  ASSERT_TRUE(cache.can_allocate(r.prompt, q));
  const Allocation a = cache.allocate(r.prompt, q);
  r.slot = a.slot;
  r.cached = a.cached_tokens;
  r.computed = a.cached_tokens;
}

void run_to_end(KvCache& cache, Req& r, int chunk) {
  std::vector<Req*> one{&r};
  while (r.computed < r.target) ASSERT_TRUE(step(cache, one, chunk).ok());
}

class PrefixCacheTest : public ::testing::TestWithParam<GrowthMode> {};

TEST_P(PrefixCacheTest, SharesBlocksAfterTheFirstRequestEnds) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache = KvCache::create(prefix_config(KvLayout::all_layers, GetParam(), 64), provider);
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  ASSERT_EQ(c.prefix_block_tokens(), 32);

  std::vector<std::int32_t> shared = seq(100, 1);
  Req a = make_req(shared, 0, 5);
  admit(c, a);
  EXPECT_EQ(a.cached, 0);
  run_to_end(c, a, 40);
  c.free(a.slot);
  EXPECT_EQ(c.stats().prefix_blocks_cached, 3);  // 96 of its 100 prompt tokens

  std::vector<std::int32_t> b_prompt(shared.begin(), shared.begin() + 96);
  const std::vector<std::int32_t> tail = seq(30, 2);
  b_prompt.insert(b_prompt.end(), tail.begin(), tail.end());
  Req b = make_req(b_prompt, 0, 3);
  admit(c, b);
  EXPECT_EQ(b.cached, 96);
  run_to_end(c, b, 40);
  EXPECT_EQ(mismatches(c, b.slot, b.tags, b.computed), 0);
  ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
  c.free(b.slot);
  c.drain();
  ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
  EXPECT_EQ(provider->ledger().double_maps, 0);
  EXPECT_EQ(provider->ledger().released_while_mapped, 0);
}

// Serving replays prompts after other requests ran (a benchmark's trace at a
// second rate, a chat's next session). A request without a hit must not take
// the idle slot that holds another prompt's blocks while free pages remain:
// before the fix every such request took the last one's slot (the best fit by
// depth) and evicted its prompt, and a repeated prompt never hit.
TEST_P(PrefixCacheTest, ARequestWithoutAHitKeepsOtherPromptsCachedWhileMemoryIsFree) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache = KvCache::create(prefix_config(KvLayout::all_layers, GetParam(), 64), provider);
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  ASSERT_EQ(c.prefix_block_tokens(), 32);

  // Four different prompts, one after another: 4 x 3 blocks stay cached.
  std::vector<Req> first;
  for (int i = 0; i < 4; ++i) {
    first.push_back(make_req(seq(100, 10 + i), 0, 4));
    admit(c, first.back());
    EXPECT_EQ(first.back().cached, 0) << "prompt " << i;
    run_to_end(c, first.back(), 40);
    c.free(first.back().slot);
  }
  EXPECT_EQ(c.stats().prefix_blocks_cached, 12);
  EXPECT_EQ(c.stats().prefix_evictions, 0);
  // The same four again, in the same order: every one hits its 96 tokens and
  // reads back what its first run wrote.
  for (int i = 0; i < 4; ++i) {
    Req again = make_req(seq(100, 10 + i), 0, 4);
    admit(c, again);
    EXPECT_EQ(again.cached, 96) << "prompt " << i;
    EXPECT_EQ(mismatches(c, again.slot, again.tags, again.cached), 0) << "prompt " << i;
    run_to_end(c, again, 40);
    c.free(again.slot);
  }
  ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
  c.drain();
  EXPECT_EQ(provider->ledger().double_maps, 0);
  EXPECT_EQ(provider->ledger().released_while_mapped, 0);
}

// Under memory pressure the cache gives way: twelve different prompts of 100
// tokens do not all fit in 64 pages, so later ones still run, and cached
// blocks are evicted to make room for them.
TEST_P(PrefixCacheTest, CachedPromptsGiveWayWhenMemoryRunsOut) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache = KvCache::create(prefix_config(KvLayout::all_layers, GetParam(), 64), provider);
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  for (int i = 0; i < 12; ++i) {
    Req r = make_req(seq(100, 100 + i), 0, 4);
    admit(c, r);
    EXPECT_EQ(r.cached, 0) << "prompt " << i;
    run_to_end(c, r, 40);
    EXPECT_EQ(mismatches(c, r.slot, r.tags, r.computed), 0) << "prompt " << i;
    c.free(r.slot);
    ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
  }
  EXPECT_GT(c.stats().prefix_evictions, 0);
  c.drain();
  EXPECT_EQ(provider->ledger().double_maps, 0);
  EXPECT_EQ(provider->ledger().released_while_mapped, 0);
}

// As the engine reports: a step's prompt after its launch, indexed at the
// next prepare(). A request that ends with its prefill (max_tokens 1) is
// freed before any next prepare: its blocks are indexed at free().
TEST_P(PrefixCacheTest, ARequestEndingWithItsPrefillStillCachesItsBlocks) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache = KvCache::create(prefix_config(KvLayout::all_layers, GetParam(), 64), provider);
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  const std::vector<std::int32_t> prompt = seq(100, 9);
  Req a = make_req(prompt, 0, 0);
  admit(c, a);
  while (a.computed < a.prompt) {
    const int n = std::min(40, a.prompt - a.computed);
    ASSERT_TRUE(c.grow(a.slot, a.computed + n));
    HybridBatch batch;
    batch.prefills.push_back({.slot = a.slot, .cached_len = a.computed, .num_new = n});
    ASSERT_TRUE(c.prepare(batch).ok());
    compute(c, a.slot, a.tags, a.computed, a.computed + n);
    c.cache_prompt(a.slot, prompt, a.computed + n);  // after the launch
    a.computed += n;
  }
  c.free(a.slot);
  EXPECT_EQ(c.stats().prefix_blocks_cached, 3);
  Req b = make_req(prompt, 0, 2);
  admit(c, b);
  EXPECT_EQ(b.cached, 96);
  run_to_end(c, b, 40);
  EXPECT_EQ(mismatches(c, b.slot, b.tags, b.computed), 0);
  c.free(b.slot);
  c.drain();
  ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
  EXPECT_EQ(provider->ledger().released_while_mapped, 0);
}

TEST_P(PrefixCacheTest, ConcurrentRequestsShareTheSamePhysicalPages) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache = KvCache::create(prefix_config(KvLayout::all_layers, GetParam(), 64), provider);
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  Req a = make_req(seq(130, 3), 0, 20);
  admit(c, a);
  std::vector<Req*> one{&a};
  ASSERT_TRUE(step(c, one, 70).ok());  // 70 computed: 2 blocks indexed
  EXPECT_EQ(c.stats().prefix_blocks_cached, 2);

  Req b = make_req(seq(130, 3), 0, 4);  // same prompt, A still running
  admit(c, b);
  EXPECT_EQ(b.cached, 64);
  EXPECT_NE(b.slot, a.slot);
  std::vector<Req*> both{&a, &b};
  while (b.computed < b.target) ASSERT_TRUE(step(c, both, 70).ok());
  EXPECT_GT(provider->ledger().shared_maps, 0);
  const std::vector<PageId> pa = c.slot_pages(a.slot);
  const std::vector<PageId> pb = c.slot_pages(b.slot);
  const auto depth_a = static_cast<std::size_t>(c.slot_depth(a.slot));
  const auto depth_b = static_cast<std::size_t>(c.slot_depth(b.slot));
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(pa[i], pb[i]);                      // K pages of the two blocks
    EXPECT_EQ(pa[depth_a + i], pb[depth_b + i]);  // V pages
  }
  EXPECT_EQ(mismatches(c, a.slot, a.tags, a.computed), 0);
  EXPECT_EQ(mismatches(c, b.slot, b.tags, b.computed), 0);
  ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
}

TEST_P(PrefixCacheTest, FullHitRecomputesTheLastBlockAndSaltsIsolate) {
  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  auto cache = KvCache::create(prefix_config(KvLayout::all_layers, GetParam(), 64), provider);
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  Req a = make_req(seq(96, 4), 7, 1);
  admit(c, a);
  run_to_end(c, a, 96);
  c.free(a.slot);

  Req same = make_req(seq(96, 4), 7, 1);
  admit(c, same);
  EXPECT_EQ(same.cached, 64);  // 3 blocks cached, the last one is computed again
  run_to_end(c, same, 96);
  EXPECT_EQ(mismatches(c, same.slot, same.tags, same.computed), 0);

  Req other_salt = make_req(seq(96, 4), 8, 1);
  admit(c, other_salt);
  EXPECT_EQ(other_salt.cached, 0);
  run_to_end(c, other_salt, 96);
  EXPECT_EQ(mismatches(c, other_salt.slot, other_salt.tags, other_salt.computed), 0);
  EXPECT_EQ(mismatches(c, same.slot, same.tags, same.computed), 0);
  ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
}

TEST_P(PrefixCacheTest, AdmissionCountsASharedBlockOnce) {
  auto provider = make_host_provider(4096);
  // 16 pages = 8 depth steps of 32 tokens (K and V).
  auto cache = KvCache::create(prefix_config(KvLayout::all_layers, GetParam(), 16), provider);
  ASSERT_TRUE(cache.ok());
  KvCache& c = **cache;
  Req a = make_req(seq(129, 5), 0, 0);  // 5 steps
  admit(c, a);
  std::vector<Req*> one{&a};
  ASSERT_TRUE(step(c, one, 129).ok());  // 4 blocks indexed, 1 private step
  EXPECT_EQ(c.used_units(), 5);
  // Another 129-token request with the same prompt shares 4 blocks and needs
  // one private step (6 used of 8); without sharing it would need 5 (10 > 8).
  Req b = make_req(seq(129, 5), 0, 0);
  const PrefixQuery qb{b.tokens, 0};
  ASSERT_TRUE(c.can_allocate(129, qb));
  admit(c, b);
  EXPECT_EQ(b.cached, 128);
  EXPECT_EQ(c.used_units(), 6);
  // A third, unrelated 129-token request needs 5: refused (6 + 5 > 8).
  Req d = make_req(seq(129, 6), 0, 0);
  EXPECT_FALSE(c.can_allocate(129, {d.tokens, 0}));
  EXPECT_TRUE(c.can_allocate(64, {d.tokens, 0}));  // 2 steps fit
  c.free(a.slot);
  EXPECT_EQ(c.used_units(), 5);  // b still pins the 4 blocks, and holds its own step
  c.free(b.slot);
  EXPECT_EQ(c.used_units(), 0);
  EXPECT_TRUE(c.can_allocate(129, {d.tokens, 0}));
  // Evicting cached blocks (and reusing idle slots) makes room for it.
  admit(c, d);
  run_to_end(c, d, 129);
  EXPECT_EQ(mismatches(c, d.slot, d.tags, d.computed), 0);
  ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
}

INSTANTIATE_TEST_SUITE_P(Growth, PrefixCacheTest,
                         ::testing::Values(GrowthMode::synchronous, GrowthMode::background),
                         [](const auto& info) {
                           return std::string(info.param == GrowthMode::background ? "Background"
                                                                                   : "Synchronous");
                         });

// Random traffic from a few prompt families (shared prefixes of random
// length), random salts, chunked prefills, decodes, preemptions and aborts,
// on a pool small enough to evict and reclaim all the time. After every step:
// the cache's invariants; every running request reads back exactly its own
// chain's K/V (shared blocks included); the provider never saw an address
// mapped twice or a page released while mapped.
TEST(PrefixCacheProperty, RandomTrafficKeepsEveryInvariant) {
  std::int64_t total_truncations = 0;  // deferred reclamation reuses slots that need one
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    for (const GrowthMode growth : {GrowthMode::synchronous, GrowthMode::background}) {
      for (const ReclaimPolicy reclaim : {ReclaimPolicy::deferred, ReclaimPolicy::eager}) {
        const unsigned seed = test_seed();
        SCOPED_TRACE(fmt::format("seed {} layout {} growth {} reclaim {}", seed,
                                 kv_layout_name(layout), growth == GrowthMode::background,
                                 reclaim == ReclaimPolicy::eager ? "eager" : "deferred"));
        std::mt19937 rng(seed);
        auto uniform = [&](int lo, int hi) {
          return std::uniform_int_distribution<int>(lo, hi)(rng);
        };
        auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
        KvCacheConfig config =
            prefix_config(layout, growth, layout == KvLayout::all_layers ? 40 : 96);
        config.reclaim = reclaim;
        config.lookahead_tokens = uniform(0, 1) * 16;
        auto created = KvCache::create(config, provider);
        ASSERT_TRUE(created.ok()) << created.status().to_string();
        KvCache& c = **created;
        ASSERT_TRUE(c.prefix_caching());

        std::vector<std::vector<std::int32_t>> families;
        for (int f = 0; f < 3; ++f) families.push_back(seq(260, 100 + f));
        std::vector<std::unique_ptr<Req>> running;
        std::int64_t hits = 0, admitted = 0;
        for (int op = 0; op < 400; ++op) {
          if (running.size() < 4 && uniform(0, 2) == 0) {
            const auto& fam = families[uniform(0, 2)];
            std::vector<std::int32_t> prompt(fam.begin(), fam.begin() + uniform(1, 200));
            const std::vector<std::int32_t> own = seq(uniform(0, 40), op + 1000);
            prompt.insert(prompt.end(), own.begin(), own.end());
            auto r =
                std::make_unique<Req>(make_req(prompt, uniform(0, 4) == 0 ? 9 : 0, uniform(1, 30)));
            r->target = std::min(r->target, config.max_ctx);
            const PrefixQuery q{r->tokens, r->salt};
            if (c.can_allocate(r->prompt, q)) {
              admit(c, *r);
              ++admitted;
              hits += r->cached > 0;
              // What it shares reads back as its own chain's K/V already.
              ASSERT_EQ(r->cached % c.prefix_block_tokens(), 0);
              ASSERT_LT(r->cached, r->prompt);
              running.push_back(std::move(r));
            }
          }
          if (running.empty()) continue;
          std::vector<Req*> batch;
          for (auto& r : running) batch.push_back(r.get());
          const Status s = step(c, batch, uniform(1, 80));
          if (!s.ok()) {
            // Out of memory: preempt the newest (the engine recomputes it later).
            c.free(running.back()->slot);
            running.pop_back();
          }
          for (auto it = running.begin(); it != running.end();) {
            Req& r = **it;
            if (s.ok()) {
              ASSERT_EQ(mismatches(c, r.slot, r.tags, r.computed), 0)
                  << "slot " << r.slot << " cached " << r.cached;
            }
            if (r.computed >= r.target || uniform(0, 30) == 0) {  // done or aborted
              c.free(r.slot);
              it = running.erase(it);
            } else {
              ++it;
            }
          }
          const Status inv = c.check_invariants();
          ASSERT_TRUE(inv.ok()) << inv.to_string();
        }
        for (auto& r : running) c.free(r->slot);
        c.drain();
        ASSERT_TRUE(c.check_invariants().ok()) << c.check_invariants().to_string();
        EXPECT_EQ(c.used_units(), 0);
        EXPECT_GT(admitted, 20);
        EXPECT_GT(hits, 0);
        const FaultInjectingProvider::Ledger ledger = provider->ledger();
        EXPECT_EQ(ledger.double_maps, 0);
        EXPECT_EQ(ledger.bad_unmaps, 0);
        EXPECT_EQ(ledger.released_while_mapped, 0);
        EXPECT_GT(ledger.shared_maps + c.stats().prefix_blocks_cached, 0);
        total_truncations += c.stats().prefix_truncations;
      }
    }
  }
  EXPECT_GT(total_truncations, 0);
}

}  // namespace
}  // namespace vpod::kvcache
