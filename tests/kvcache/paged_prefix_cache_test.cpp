// Prefix caching in the paged baseline (paged_kv_cache.h): hits after a
// request ends and while it still runs, the whole-prompt rule, salts, LRU
// eviction, admission that counts a shared block once, and a randomized
// property test against a simple model. K/V are written per token through
// the block tables (on the CPU the pool is host memory) as a function of the
// salt and every token up to that position, so a slot that reads back its
// own tokens' pattern proves a shared block was never rewritten and never
// shared across different prefixes or salts.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "common/splitmix64.h"
#include "kv_test_util.h"
#include "kvcache/paged_kv_cache.h"

namespace vpod::kvcache {
namespace {

using testing::paged_element;
using testing::pattern;
using Tokens = std::vector<std::int32_t>;
using Tags = std::vector<std::uint32_t>;

constexpr int kBlock = 4;  // tokens per block: small, so prompts span many blocks

PagedKvCacheConfig prefix_config(int blocks, bool prefix_caching = true) {
  PagedKvCacheConfig config;
  config.shape = KvShape{2, 2, 4, DType::f32};
  config.block_size = kBlock;
  config.max_slots = 6;
  config.max_ctx = 64;
  config.memory_bytes = static_cast<std::size_t>(blocks) * kBlock * config.shape.bytes_per_token();
  config.prefix_caching = prefix_caching;
  config.prefix_salt = 42;
  return config;
}

std::unique_ptr<PagedKvCache> make_cache(int blocks, bool prefix_caching = true) {
  auto created = PagedKvCache::create(prefix_config(blocks, prefix_caching));
  VPOD_CHECK_MSG(created.ok(), created.status().to_string());
  return std::move(created).value();
}

// `n` tokens counting up from `first`.
Tokens tokens_from(std::int32_t first, int n) {
  Tokens tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = first + i;
  return tokens;
}

Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What a model's K/V at position i depend on: the salt and tokens [0, i].
Tags kv_tags(std::uint64_t salt, const Tokens& tokens) {
  Tags tags;
  std::uint64_t h = splitmix64(salt);
  for (const std::int32_t t : tokens) {
    h = splitmix64(h ^ static_cast<std::uint32_t>(t));
    tags.push_back(static_cast<std::uint32_t>(h ^ (h >> 32)));
  }
  return tags;
}

void write_kv(const PagedKvCache& cache, int slot, const Tags& tags, int begin, int end) {
  const KvShape& shape = cache.config().shape;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const PagedKvView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv) {
      for (int t = begin; t < end; ++t) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int d = 0; d < shape.head_dim; ++d) {
            *paged_element(view, kv, slot, t, h, d) = pattern(tags[t], layer, kv, t, h, d);
          }
        }
      }
    }
  }
}

// Elements of tokens [0, end) of `slot` that are not its tokens' K/V.
std::int64_t kv_mismatches(const PagedKvCache& cache, int slot, const Tags& tags, int end) {
  const KvShape& shape = cache.config().shape;
  std::int64_t bad = 0;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const PagedKvView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv) {
      for (int t = 0; t < end; ++t) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int d = 0; d < shape.head_dim; ++d) {
            bad += *paged_element(view, kv, slot, t, h, d) != pattern(tags[t], layer, kv, t, h, d);
          }
        }
      }
    }
  }
  return bad;
}

// One prefill chunk [from, to): the step's blocks through prepare(batch),
// then its K/V, as the model's forward would write them.
void compute(PagedKvCache& cache, int slot, const Tags& tags, int from, int to) {
  HybridBatch batch;
  batch.prefills.push_back(
      {.slot = slot, .cached_len = from, .num_new = to - from, .token_offset = 0});
  const Status status = cache.prepare(batch);
  ASSERT_TRUE(status.ok()) << status.to_string();
  write_kv(cache, slot, tags, from, to);
}

void expect_invariants(const PagedKvCache& cache) {
  const Status status = cache.check_invariants();
  EXPECT_TRUE(status.ok()) << status.to_string();
}

TEST(PagedPrefixCache, HitsAfterTheRequestFinished) {
  auto cache = make_cache(32);
  const Tokens a = tokens_from(1, 10);  // 2 full blocks and 2 tokens
  const Tags tags_a = kv_tags(0, a);
  ASSERT_TRUE(cache->can_allocate(10, {a, 0}));
  const Allocation first = cache->allocate(10, {a, 0});
  EXPECT_EQ(first.cached_tokens, 0);  // nothing cached yet
  compute(*cache, first.slot, tags_a, 0, 10);
  cache->cache_prompt(first.slot, a, 10);
  EXPECT_EQ(cache->stats().prefix_blocks_cached, 2);
  const std::vector<std::int32_t> a_blocks = cache->block_table(first.slot);
  cache->free(first.slot);
  KvStats stats = cache->stats();
  EXPECT_EQ(stats.prefix_blocks_cached, 2);
  EXPECT_EQ(stats.prefix_blocks_unreferenced, 2);
  EXPECT_EQ(stats.pages_free, 32);  // cached blocks are free to evict
  EXPECT_EQ(cache->free_tokens(), 32 * kBlock);
  EXPECT_EQ(cache->used_units(), 0);
  expect_invariants(*cache);

  // B starts with A's first 8 tokens.
  const Tokens b = concat(Tokens(a.begin(), a.begin() + 8), tokens_from(100, 5));
  const Tags tags_b = kv_tags(0, b);
  const Allocation second = cache->allocate(13, {b, 0});
  EXPECT_EQ(second.cached_tokens, 8);
  EXPECT_EQ(cache->block_table(second.slot), (std::vector<std::int32_t>{a_blocks[0], a_blocks[1]}));
  EXPECT_EQ(cache->backed_tokens(second.slot), 8);
  EXPECT_EQ(kv_mismatches(*cache, second.slot, tags_b, 8), 0);  // A's K/V are B's
  // 4 blocks promised: 2 private, 2 shared that nobody else holds.
  EXPECT_EQ(cache->used_units(), 4);
  EXPECT_EQ(cache->stats().prefix_blocks_unreferenced, 0);
  compute(*cache, second.slot, tags_b, 8, 13);
  EXPECT_EQ(kv_mismatches(*cache, second.slot, tags_b, 13), 0);
  expect_invariants(*cache);
  cache->free(second.slot);
  EXPECT_EQ(cache->used_units(), 0);
  expect_invariants(*cache);
}

TEST(PagedPrefixCache, SharesBlocksWhileTheirRequestStillRuns) {
  auto cache = make_cache(32);
  const Tokens prompt = tokens_from(1, 14);  // 3 full blocks and 2 tokens
  const Tags tags = kv_tags(0, prompt);
  const Allocation a = cache->allocate(20, {prompt, 0});
  compute(*cache, a.slot, tags, 0, 6);
  cache->cache_prompt(a.slot, prompt, 6);  // block 0 is computed
  EXPECT_EQ(cache->stats().prefix_blocks_cached, 1);

  // B arrives before A's second block is: it shares block 0 only.
  const Allocation b = cache->allocate(14, {prompt, 0});
  EXPECT_EQ(b.cached_tokens, 4);
  EXPECT_EQ(cache->block_table(b.slot)[0], cache->block_table(a.slot)[0]);
  compute(*cache, a.slot, tags, 6, 14);
  cache->cache_prompt(a.slot, prompt, 14);
  compute(*cache, b.slot, tags, 4, 14);
  cache->cache_prompt(b.slot, prompt, 14);  // A indexed blocks 1 and 2 first: B's stay private
  EXPECT_EQ(cache->stats().prefix_blocks_cached, 3);
  EXPECT_NE(cache->block_table(b.slot)[1], cache->block_table(a.slot)[1]);

  // C gets every full block of the prompt from A.
  const Allocation c = cache->allocate(14, {prompt, 0});
  EXPECT_EQ(c.cached_tokens, 12);
  const std::vector<std::int32_t> a_table = cache->block_table(a.slot);
  EXPECT_EQ(cache->block_table(c.slot),
            (std::vector<std::int32_t>{a_table[0], a_table[1], a_table[2]}));
  compute(*cache, c.slot, tags, 12, 14);

  // A decodes into its own blocks, then ends; B and C keep what they share.
  const Tokens a_tokens = concat(prompt, tokens_from(500, 6));
  const Tags a_tags = kv_tags(0, a_tokens);
  for (int t = 14; t < 20; ++t) compute(*cache, a.slot, a_tags, t, t + 1);
  EXPECT_EQ(kv_mismatches(*cache, a.slot, a_tags, 20), 0);
  expect_invariants(*cache);
  cache->free(a.slot);
  EXPECT_EQ(cache->stats().prefix_blocks_unreferenced, 0);  // all still held
  expect_invariants(*cache);

  // Another request fills every free block with its own K/V.
  const Tokens x = tokens_from(1000, 64);
  const Allocation other = cache->allocate(64, {x, 0});
  EXPECT_EQ(other.cached_tokens, 0);
  compute(*cache, other.slot, kv_tags(0, x), 0, 64);
  EXPECT_EQ(kv_mismatches(*cache, b.slot, tags, 14), 0);
  EXPECT_EQ(kv_mismatches(*cache, c.slot, tags, 14), 0);
  expect_invariants(*cache);
}

TEST(PagedPrefixCache, AWholePromptHitStillComputesItsLastBlock) {
  auto cache = make_cache(32);
  const Tokens prompt = tokens_from(1, 8);  // exactly 2 blocks
  const Tags tags = kv_tags(0, prompt);
  const Allocation a = cache->allocate(8, {prompt, 0});
  compute(*cache, a.slot, tags, 0, 8);
  cache->cache_prompt(a.slot, prompt, 8);
  const std::vector<std::int32_t> a_blocks = cache->block_table(a.slot);
  cache->free(a.slot);

  // The same prompt again: the last token is computed for the logits, so
  // the last block is not reused, and the slot never writes a shared block.
  const Allocation b = cache->allocate(8, {prompt, 0});
  EXPECT_EQ(b.cached_tokens, 4);
  compute(*cache, b.slot, tags, 4, 8);
  const std::vector<std::int32_t> b_blocks = cache->block_table(b.slot);
  EXPECT_EQ(b_blocks[0], a_blocks[0]);
  EXPECT_NE(b_blocks[1], a_blocks[1]);
  cache->cache_prompt(b.slot, prompt, 8);  // A's copy of block 1 is indexed: B's stays private
  EXPECT_EQ(cache->stats().prefix_blocks_cached, 2);
  EXPECT_EQ(kv_mismatches(*cache, b.slot, tags, 8), 0);
  expect_invariants(*cache);

  // One more token and both blocks are reused.
  const Tokens longer = concat(prompt, {77});
  EXPECT_EQ(cache->allocate(9, {longer, 0}).cached_tokens, 8);
  // Never past the tokens allocated, nor from less than one full block.
  EXPECT_EQ(cache->allocate(5, {longer, 0}).cached_tokens, 4);
  EXPECT_EQ(cache->allocate(4, {longer, 0}).cached_tokens, 0);
  EXPECT_EQ(cache->allocate(3, {Tokens{1, 2, 3}, 0}).cached_tokens, 0);
  expect_invariants(*cache);
}

TEST(PagedPrefixCache, SaltsIsolateTenants) {
  auto cache = make_cache(32);
  const Tokens prompt = tokens_from(1, 9);
  const Allocation a = cache->allocate(9, {prompt, 7});
  compute(*cache, a.slot, kv_tags(7, prompt), 0, 9);
  cache->cache_prompt(a.slot, prompt, 9);
  cache->free(a.slot);
  EXPECT_EQ(cache->allocate(9, {prompt, 0}).cached_tokens, 0);
  const Allocation other = cache->allocate(9, {prompt, 8});
  EXPECT_EQ(other.cached_tokens, 0);
  // The other tenant's blocks are indexed beside the first's, not shared.
  compute(*cache, other.slot, kv_tags(8, prompt), 0, 9);
  cache->cache_prompt(other.slot, prompt, 9);
  EXPECT_EQ(cache->stats().prefix_blocks_cached, 4);
  const Allocation same = cache->allocate(9, {prompt, 7});
  EXPECT_EQ(same.cached_tokens, 8);
  EXPECT_EQ(kv_mismatches(*cache, same.slot, kv_tags(7, prompt), 8), 0);
  const Allocation again = cache->allocate(9, {prompt, 8});
  EXPECT_EQ(again.cached_tokens, 8);
  EXPECT_EQ(kv_mismatches(*cache, again.slot, kv_tags(8, prompt), 8), 0);
  expect_invariants(*cache);
}

TEST(PagedPrefixCache, EvictsTheLeastRecentlyUsedTailFirstOnlyWhenNothingIsFree) {
  auto cache = make_cache(8);
  const Tokens a = tokens_from(1, 13);  // 3 full blocks and 1 token
  const Tokens b = tokens_from(100, 13);
  std::vector<std::int32_t> a_blocks;
  std::vector<std::int32_t> b_blocks;
  for (const Tokens* prompt : {&a, &b}) {
    const Allocation r = cache->allocate(13, {*prompt, 0});
    compute(*cache, r.slot, kv_tags(0, *prompt), 0, 13);
    cache->cache_prompt(r.slot, *prompt, 13);
    (prompt == &a ? a_blocks : b_blocks) = cache->block_table(r.slot);
    cache->free(r.slot);
  }
  // Cached, least recently used first: a2 a1 a0 b2 b1 b0; two blocks free.
  KvStats stats = cache->stats();
  EXPECT_EQ(stats.prefix_blocks_cached, 6);
  EXPECT_EQ(stats.prefix_blocks_unreferenced, 6);
  EXPECT_EQ(stats.pages_free, 8);
  EXPECT_EQ(stats.prefix_evictions, 0);

  const Tokens c = tokens_from(200, 16);
  const Allocation rc = cache->allocate(16, {c, 0});
  EXPECT_EQ(rc.cached_tokens, 0);
  compute(*cache, rc.slot, kv_tags(0, c), 0, 16);
  const std::vector<std::int32_t> c_blocks = cache->block_table(rc.slot);
  // The free list first (a3, b3), then A's tail.
  EXPECT_EQ(c_blocks[2], a_blocks[2]);
  EXPECT_EQ(c_blocks[3], a_blocks[1]);
  stats = cache->stats();
  EXPECT_EQ(stats.prefix_evictions, 2);
  EXPECT_EQ(stats.prefix_blocks_cached, 4);

  // A's chain now breaks after a0; D takes it and evicts B's blocks tail first.
  const Allocation rd = cache->allocate(13, {a, 0});
  EXPECT_EQ(rd.cached_tokens, 4);
  compute(*cache, rd.slot, kv_tags(0, a), 4, 13);
  EXPECT_EQ(cache->block_table(rd.slot),
            (std::vector<std::int32_t>{a_blocks[0], b_blocks[2], b_blocks[1], b_blocks[0]}));
  EXPECT_EQ(cache->stats().prefix_evictions, 5);
  EXPECT_EQ(kv_mismatches(*cache, rd.slot, kv_tags(0, a), 13), 0);
  EXPECT_EQ(kv_mismatches(*cache, rc.slot, kv_tags(0, c), 16), 0);
  EXPECT_FALSE(cache->can_allocate(1, {}));  // every block is promised
  expect_invariants(*cache);
}

TEST(PagedPrefixCache, AdmissionCountsASharedBlockOnceAndRefusesExactlyAtTheEnd) {
  auto cache = make_cache(10);
  const Tokens prompt = tokens_from(1, 16);  // 4 full blocks
  const Tags tags = kv_tags(0, prompt);
  const Allocation a = cache->allocate(20, {prompt, 0});
  EXPECT_EQ(cache->used_units(), 5);
  compute(*cache, a.slot, tags, 0, 16);
  cache->cache_prompt(a.slot, prompt, 16);
  EXPECT_EQ(cache->used_units(), 5);  // 1 private + 4 shared

  // B shares A's 4 blocks while A runs: it costs its one own block.
  const Tokens b_tokens = concat(prompt, tokens_from(50, 4));
  ASSERT_TRUE(cache->can_allocate(20, {b_tokens, 0}));
  const Allocation b = cache->allocate(20, {b_tokens, 0});
  EXPECT_EQ(b.cached_tokens, 16);
  EXPECT_EQ(cache->used_units(), 6);
  EXPECT_FALSE(cache->can_allocate(20, {}));  // 5 blocks without the prefix
  EXPECT_TRUE(cache->can_allocate(16, {}));   // 4: exactly the last ones
  EXPECT_FALSE(cache->can_allocate(17, {}));
  const Allocation c = cache->allocate(12, {});
  EXPECT_EQ(cache->used_units(), 9);
  const Tokens d_tokens = concat(prompt, {60});
  EXPECT_TRUE(cache->can_allocate(17, {d_tokens, 0}));  // 5 blocks, 4 held: 1
  EXPECT_FALSE(cache->can_allocate(21, {concat(d_tokens, tokens_from(61, 4)), 0}));  // 2
  const Allocation d = cache->allocate(17, {d_tokens, 0});
  EXPECT_EQ(d.cached_tokens, 16);
  EXPECT_EQ(cache->used_units(), 10);
  EXPECT_DOUBLE_EQ(cache->usage(), 1.0);
  EXPECT_FALSE(cache->can_allocate(1, {}));
  EXPECT_FALSE(cache->grow(d.slot, 21));
  // Every promise is backed: the pool holds them all exactly.
  const Tokens a_tokens = concat(prompt, tokens_from(40, 4));
  compute(*cache, a.slot, kv_tags(0, a_tokens), 16, 20);
  compute(*cache, b.slot, kv_tags(0, b_tokens), 16, 20);
  compute(*cache, c.slot, kv_tags(0, tokens_from(300, 12)), 0, 12);
  compute(*cache, d.slot, kv_tags(0, d_tokens), 16, 17);
  EXPECT_EQ(cache->stats().pages_free, 0);
  expect_invariants(*cache);

  // The sharers end; their blocks stay cached, unreferenced.
  cache->free(a.slot);
  EXPECT_EQ(cache->used_units(), 9);  // A's private block
  cache->free(b.slot);
  cache->free(d.slot);
  EXPECT_EQ(cache->used_units(), 3);  // C alone
  EXPECT_EQ(cache->stats().prefix_blocks_unreferenced, 4);
  // A hit on unreferenced cached blocks costs each one block, as fresh ones.
  const Tokens e_tokens = concat(prompt, tokens_from(70, 12));
  EXPECT_TRUE(cache->can_allocate(28, {e_tokens, 0}));   // 7 blocks
  EXPECT_FALSE(cache->can_allocate(29, {e_tokens, 0}));  // 8
  const Allocation e = cache->allocate(28, {e_tokens, 0});
  EXPECT_EQ(e.cached_tokens, 16);
  EXPECT_EQ(cache->used_units(), 10);
  compute(*cache, e.slot, kv_tags(0, e_tokens), 16, 28);
  EXPECT_EQ(cache->stats().prefix_evictions, 0);
  cache->free(e.slot);

  // A request that matches nothing evicts the cached blocks it needs.
  const Tokens f_tokens = tokens_from(900, 28);
  ASSERT_TRUE(cache->can_allocate(28, {f_tokens, 0}));
  const Allocation f = cache->allocate(28, {f_tokens, 0});
  compute(*cache, f.slot, kv_tags(0, f_tokens), 0, 28);
  EXPECT_EQ(cache->stats().prefix_evictions, 4);
  EXPECT_EQ(cache->stats().prefix_blocks_cached, 0);
  EXPECT_EQ(kv_mismatches(*cache, f.slot, kv_tags(0, f_tokens), 28), 0);
  expect_invariants(*cache);
}

TEST(PagedPrefixCache, OffCachesNothing) {
  auto cache = make_cache(32, /*prefix_caching=*/false);
  const Tokens prompt = tokens_from(1, 12);
  const Allocation a = cache->allocate(12, {prompt, 0});
  compute(*cache, a.slot, kv_tags(0, prompt), 0, 12);
  cache->cache_prompt(a.slot, prompt, 12);
  EXPECT_EQ(cache->allocate(12, {prompt, 0}).cached_tokens, 0);
  cache->free(a.slot);
  EXPECT_EQ(cache->allocate(12, {prompt, 0}).cached_tokens, 0);
  const KvStats stats = cache->stats();
  EXPECT_EQ(stats.prefix_blocks_cached, 0);
  EXPECT_EQ(stats.prefix_evictions, 0);
  EXPECT_EQ(cache->used_units(), 6);
  expect_invariants(*cache);
}

// ----------------------------------------------------------------------------
// Randomized: admit (with hits), prefill chunks, decode with growth, preempt
// (free, then re-admit with prompt and outputs), abort, finish; evictions
// under a small pool; two salts. A simple model keeps what the cache should
// hold by content: the indexed blocks keyed by (salt, every token up to the
// block's end) with their holders and LRU stamps, each request's table as
// keys or private blocks, and the free list's size. After every operation
// the cache must agree with it, every running request must read back its own
// tokens' K/V, and check_invariants() must pass.
// ----------------------------------------------------------------------------
class PrefixCacheModel {
 public:
  using Key = std::pair<std::uint64_t, Tokens>;  // salt, tokens [0, block end)
  struct Block {
    int refs = 0;
    std::uint64_t released = 0;  // LRU stamp once unreferenced
    std::int32_t id = -1;        // the cache's block
  };
  struct Request {
    std::uint64_t salt = 0;
    Tokens tokens;  // prompt, then outputs
    int prompt_len = 0;
    Tags tags;
    int slot = -1;
    int promised = 0;
    int computed = 0;
    int hashed = 0;                         // leading blocks cache_prompt has seen
    std::vector<std::optional<Key>> table;  // per block: indexed key, or private
  };

  PrefixCacheModel(PagedKvCache& cache, unsigned seed)
      : cache_(cache), rng_(seed), free_(cache.num_blocks()), slots_(cache.max_slots()) {
    for (Tokens& stem : stems_) {
      for (int i = 0; i < 40; ++i) stem.push_back(uniform(1, 20));
    }
  }

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void step() {
    const int action = uniform(0, 19);
    std::vector<int> running;
    for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
      if (slots_[s]) running.push_back(s);
    }
    if (action < 5 || running.empty()) {
      admit();
    } else if (action < 17) {
      advance(running[uniform(0, static_cast<int>(running.size()) - 1)]);
    } else {
      // Preempt (re-admitted later), abort or finish: all are frees.
      const int slot = running[uniform(0, static_cast<int>(running.size()) - 1)];
      end(slot, /*requeue=*/action == 17);
    }
  }

  void verify() {
    const Status status = cache_.check_invariants();
    ASSERT_TRUE(status.ok()) << status.to_string();
    const KvStats stats = cache_.stats();
    int unreferenced = 0;
    for (const auto& [key, block] : cached_) unreferenced += block.refs == 0;
    ASSERT_EQ(stats.prefix_blocks_cached, static_cast<std::int64_t>(cached_.size()));
    ASSERT_EQ(stats.prefix_blocks_unreferenced, unreferenced);
    ASSERT_EQ(stats.prefix_evictions, evictions);
    ASSERT_EQ(stats.pages_free, free_ + unreferenced);
    ASSERT_EQ(cache_.used_units(), used());
    ASSERT_LE(used(), cache_.num_blocks());
    for (int s = 0; s < static_cast<int>(slots_.size()); ++s) {
      if (!slots_[s]) continue;
      const Request& r = *slots_[s];
      const std::vector<std::int32_t> table = cache_.block_table(s);
      ASSERT_EQ(table.size(), r.table.size());
      for (std::size_t b = 0; b < table.size(); ++b) {
        if (r.table[b]) {
          ASSERT_EQ(table[b], cached_.at(*r.table[b]).id);
        }
      }
      ASSERT_EQ(kv_mismatches(cache_, s, r.tags, r.computed), 0) << "slot " << s;
    }
  }

  // What the workload exercised.
  std::int64_t hits = 0;         // tokens admitted from the cache
  std::int64_t shared_hits = 0;  // blocks reused while another request held them
  std::int64_t duplicates = 0;   // computed blocks someone else had indexed first
  std::int64_t preemptions = 0;  // growth refused for memory
  std::int64_t evictions = 0;

 private:
  static int blocks(int tokens) { return (tokens + kBlock - 1) / kBlock; }

  std::int64_t used() const {
    std::int64_t units = 0;
    for (const auto& r : slots_) {
      if (!r) continue;
      const auto indexed = std::count_if(r->table.begin(), r->table.end(),
                                         [](const auto& key) { return key.has_value(); });
      units += blocks(r->promised) - indexed;
    }
    for (const auto& [key, block] : cached_) units += block.refs > 0;
    return units;
  }

  Key key_of(const Request& r, int block) const {
    return {r.salt, Tokens(r.tokens.begin(), r.tokens.begin() + (block + 1) * kBlock)};
  }

  Request new_request() {
    Request r;
    r.salt = uniform(0, 3) == 0 ? 1 : 0;
    if (!history_.empty() && uniform(0, 4) == 0) {
      // A next turn: a finished conversation plus new tokens.
      const Request& past = history_[uniform(0, static_cast<int>(history_.size()) - 1)];
      r.salt = past.salt;
      r.tokens = past.tokens;
    } else {
      const Tokens& stem = stems_[uniform(0, 2)];
      r.tokens.assign(stem.begin(), stem.begin() + uniform(0, 40));
    }
    const int extra = uniform(1, 10);
    for (int i = 0; i < extra; ++i) r.tokens.push_back(uniform(1, 20));
    if (r.tokens.size() > 48) r.tokens.resize(48);
    r.prompt_len = static_cast<int>(r.tokens.size());
    return r;
  }

  void admit() {
    const bool from_queue = !waiting_.empty() && uniform(0, 1) == 0;
    Request r = from_queue ? waiting_.front() : new_request();
    const int num_tokens =
        std::min(cache_.max_ctx(), static_cast<int>(r.tokens.size()) + uniform(0, 8));
    // The longest indexed prefix, never every token.
    const int limit = (std::min<int>(num_tokens, r.tokens.size()) - 1) / kBlock;
    int matched = 0;
    int held = 0;
    while (matched < limit && cached_.contains(key_of(r, matched))) {
      held += cached_.at(key_of(r, matched)).refs > 0;
      ++matched;
    }
    const bool slot_free =
        std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return !s.has_value(); });
    const bool fits = slot_free && used() + blocks(num_tokens) - held <= cache_.num_blocks();
    const PrefixQuery query{r.tokens, r.salt};
    ASSERT_EQ(cache_.can_allocate(num_tokens, query), fits);
    if (!fits) return;
    if (from_queue) waiting_.pop_front();
    const Allocation allocation = cache_.allocate(num_tokens, query);
    ASSERT_EQ(allocation.cached_tokens, matched * kBlock);
    hits += allocation.cached_tokens;
    shared_hits += held;
    r.slot = allocation.slot;
    r.promised = num_tokens;
    r.computed = matched * kBlock;
    r.hashed = matched;
    r.table.clear();
    for (int b = 0; b < matched; ++b) {
      Block& block = cached_.at(key_of(r, b));
      ++block.refs;
      r.table.push_back(key_of(r, b));
    }
    r.tags = kv_tags(r.salt, r.tokens);
    ASSERT_FALSE(slots_[r.slot].has_value());
    slots_[r.slot] = std::move(r);
  }

  // Computes the request's next tokens: a prefill chunk, or one new token.
  void advance(int slot) {
    Request& r = *slots_[slot];
    int to = 0;
    if (r.computed < static_cast<int>(r.tokens.size())) {
      to = r.computed + uniform(1, static_cast<int>(r.tokens.size()) - r.computed);
    } else {
      if (static_cast<int>(r.tokens.size()) == cache_.max_ctx()) return end(slot, false);
      r.tokens.push_back(uniform(1, 20));
      r.tags = kv_tags(r.salt, r.tokens);
      to = static_cast<int>(r.tokens.size());
      if (to > r.promised) {
        const bool fits = used() + blocks(to) - blocks(r.promised) <= cache_.num_blocks();
        ASSERT_EQ(cache_.grow(slot, to), fits);
        if (!fits) {
          ++preemptions;
          return end(slot, /*requeue=*/true);
        }
        r.promised = to;
      }
    }
    ASSERT_LE(to, r.promised);
    // The blocks the step adds: the free list first, then the oldest
    // unreferenced cached block (whose id the cache must hand out).
    std::vector<std::int32_t> evicted;
    for (int b = static_cast<int>(r.table.size()); b < blocks(to); ++b) {
      r.table.emplace_back();
      if (free_ > 0) {
        --free_;
        evicted.push_back(-1);
        continue;
      }
      auto oldest = cached_.end();
      for (auto it = cached_.begin(); it != cached_.end(); ++it) {
        if (it->second.refs == 0 &&
            (oldest == cached_.end() || it->second.released < oldest->second.released)) {
          oldest = it;
        }
      }
      ASSERT_NE(oldest, cached_.end()) << "the model ran out of blocks";
      evicted.push_back(oldest->second.id);
      cached_.erase(oldest);
      ++evictions;
    }
    const int first_new_block = blocks(to) - static_cast<int>(evicted.size());
    HybridBatch batch;
    batch.prefills.push_back(
        {.slot = slot, .cached_len = r.computed, .num_new = to - r.computed, .token_offset = 0});
    const Status status = cache_.prepare(batch);
    ASSERT_TRUE(status.ok()) << status.to_string();
    const std::vector<std::int32_t> table = cache_.block_table(slot);
    for (std::size_t i = 0; i < evicted.size(); ++i) {
      if (evicted[i] >= 0) {
        ASSERT_EQ(table[first_new_block + i], evicted[i]);
      }
    }
    // Never a write into an indexed block (whoever holds it).
    std::set<std::int32_t> indexed_ids;
    for (const auto& [key, block] : cached_) indexed_ids.insert(block.id);
    for (int b = r.computed / kBlock; b < blocks(to); ++b) {
      ASSERT_FALSE(indexed_ids.contains(table[b])) << "a write into indexed block " << table[b];
    }
    write_kv(cache_, slot, r.tags, r.computed, to);
    r.computed = to;
    // The engine reports the prompt's progress; full prompt blocks the slot
    // computed itself are indexed unless their content already is.
    const std::span<const std::int32_t> prompt(r.tokens.data(), r.prompt_len);
    cache_.cache_prompt(slot, prompt, r.computed);
    const int full = std::min(r.computed, r.prompt_len) / kBlock;
    for (int b = r.hashed; b < full; ++b) {
      const Key key = key_of(r, b);
      if (!cached_.contains(key)) {
        cached_[key] = Block{.refs = 1, .released = 0, .id = table[b]};
        r.table[b] = key;
      } else {
        ++duplicates;
      }
    }
    r.hashed = std::max(r.hashed, full);
  }

  // Frees the slot: holders leave tail first; private blocks go free.
  void end(int slot, bool requeue) {
    Request& r = *slots_[slot];
    cache_.free(slot);
    for (int b = static_cast<int>(r.table.size()) - 1; b >= 0; --b) {
      if (!r.table[b]) {
        ++free_;
        continue;
      }
      Block& block = cached_.at(*r.table[b]);
      if (--block.refs == 0) block.released = ++clock_;
    }
    if (requeue) {
      // Re-admitted with everything it knows (prompt and outputs); its
      // prompt stays what the engine reports to cache_prompt.
      r.slot = -1;
      r.computed = 0;
      r.hashed = 0;
      r.table.clear();
      if (waiting_.size() < 4) waiting_.push_back(std::move(r));
    } else if (history_.size() < 16) {
      history_.push_back(r);
    } else {
      history_[uniform(0, 15)] = r;
    }
    slots_[slot].reset();
  }

  PagedKvCache& cache_;
  std::mt19937 rng_;
  Tokens stems_[3];
  std::map<Key, Block> cached_;
  std::int64_t free_;
  std::uint64_t clock_ = 0;
  std::vector<std::optional<Request>> slots_;
  std::deque<Request> waiting_;
  std::vector<Request> history_;
};

TEST(PagedPrefixCache, RandomWorkloadKeepsEveryInvariant) {
  std::vector<unsigned> seeds{1, 2, 3, 4, 5};
  seeds.push_back(std::random_device{}());
  std::int64_t hits = 0, shared_hits = 0, duplicates = 0, preemptions = 0, evictions = 0;
  for (const unsigned seed : seeds) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto cache = make_cache(40);
    PrefixCacheModel model(*cache, seed);
    for (int op = 0; op < 3000; ++op) {
      SCOPED_TRACE("op " + std::to_string(op));
      model.step();
      if (::testing::Test::HasFatalFailure()) return;
      model.verify();
      if (::testing::Test::HasFatalFailure()) return;
    }
    hits += model.hits;
    shared_hits += model.shared_hits;
    duplicates += model.duplicates;
    preemptions += model.preemptions;
    evictions += model.evictions;
  }
  // The workload did what it is for (each seed gives several times these).
  EXPECT_GT(hits, 6 * 1000);
  EXPECT_GT(shared_hits, 6 * 100);
  EXPECT_GT(duplicates, 6 * 2);
  EXPECT_GT(preemptions, 6);
  EXPECT_GT(evictions, 6 * 100);
}

}  // namespace
}  // namespace vpod::kvcache
