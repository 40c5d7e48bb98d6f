// PrefixIndex, the prefix cache's block index: chain hashes, exact lookups,
// salts, holder counts, the LRU list of unreferenced blocks, and the
// open-addressing table's backward-shift deletion under many inserts and
// evictions, checked against a std::map model.
#include "kvcache/prefix_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace vpod::kvcache {
namespace {

using BlockId = PrefixIndex::BlockId;
using Tokens = std::vector<std::int32_t>;

TEST(PrefixIndex, ChainsDependOnParentTokensAndSalts) {
  const PrefixIndex a(8, 4, 1);
  const PrefixIndex b(8, 4, 2);
  EXPECT_EQ(a.root(0), PrefixIndex(8, 4, 1).root(0));
  EXPECT_NE(a.root(0), a.root(1));
  EXPECT_NE(a.root(0), b.root(0));  // the store salt separates stores
  const Tokens t{1, 2, 3, 4};
  EXPECT_EQ(PrefixIndex::chain(7, t), PrefixIndex::chain(7, t));
  EXPECT_NE(PrefixIndex::chain(7, t), PrefixIndex::chain(8, t));
  EXPECT_NE(PrefixIndex::chain(7, t), PrefixIndex::chain(7, Tokens{1, 2, 3, 5}));
  EXPECT_NE(PrefixIndex::chain(7, t), PrefixIndex::chain(7, Tokens{2, 1, 3, 4}));
}

TEST(PrefixIndex, InsertFindAndDuplicates) {
  PrefixIndex index(4, 2, 0);
  const std::uint64_t root = index.root(0);
  const BlockId a = index.insert(root, Tokens{1, 2});
  ASSERT_NE(a, PrefixIndex::kNone);
  EXPECT_TRUE(index.indexed(a));
  EXPECT_EQ(index.refs(a), 1);  // its creator holds it
  EXPECT_EQ(index.hash(a), PrefixIndex::chain(root, Tokens{1, 2}));
  EXPECT_EQ(index.find(root, Tokens{1, 2}), a);
  EXPECT_EQ(index.find(root, Tokens{2, 1}), PrefixIndex::kNone);
  EXPECT_EQ(index.find(root + 1, Tokens{1, 2}), PrefixIndex::kNone);  // another parent
  EXPECT_EQ(index.find(root, Tokens{1}), PrefixIndex::kNone);         // not a block
  EXPECT_EQ(index.insert(root, Tokens{1, 2}), PrefixIndex::kNone);    // already indexed
  EXPECT_EQ(index.size(), 1);
  // Full: nothing more is indexed.
  for (std::int32_t t = 3; t < 6; ++t) ASSERT_NE(index.insert(root, Tokens{t, t}), -1);
  EXPECT_EQ(index.size(), 4);
  EXPECT_EQ(index.insert(root, Tokens{9, 9}), PrefixIndex::kNone);
  EXPECT_EQ(index.find(root, Tokens{9, 9}), PrefixIndex::kNone);
  EXPECT_TRUE(index.check().ok());
}

TEST(PrefixIndex, MatchFollowsTheChainUnderOneSalt) {
  PrefixIndex index(16, 2, 5);
  const Tokens prompt{1, 2, 3, 4, 5, 6, 7};  // 3 full blocks and one token
  std::uint64_t parent = index.root(11);
  std::vector<BlockId> ids;
  for (int b = 0; b < 3; ++b) {
    const Tokens block(prompt.begin() + 2 * b, prompt.begin() + 2 * b + 2);
    ids.push_back(index.insert(parent, block));
    ASSERT_NE(ids.back(), PrefixIndex::kNone);
    parent = index.hash(ids.back());
  }
  std::vector<BlockId> out;
  EXPECT_EQ(index.match(prompt, 11, 100, out), 3);
  EXPECT_EQ(out, ids);
  EXPECT_EQ(index.match(prompt, 11, 2, out), 2);  // capped
  EXPECT_EQ(out, (std::vector<BlockId>{ids[0], ids[1]}));
  EXPECT_EQ(index.match(prompt, 12, 100, out), 0);  // another tenant
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(index.match(Tokens{1, 2, 3, 9, 5, 6}, 11, 100, out), 1);  // diverges in block 1
  EXPECT_EQ(index.match(Tokens{1, 2, 3}, 11, 100, out), 1);           // one full block
  EXPECT_EQ(index.match(Tokens{}, 11, 100, out), 0);
  EXPECT_EQ(index.match(prompt, 11, -1, out), 0);
  // A middle block evicted breaks the chain there, though its child stays.
  index.drop_ref(ids[1]);
  index.evict(ids[1]);
  EXPECT_EQ(index.match(prompt, 11, 100, out), 1);
  EXPECT_TRUE(index.indexed(ids[2]));
  EXPECT_TRUE(index.check().ok());
  // A default-constructed index matches nothing.
  const PrefixIndex empty;
  EXPECT_EQ(empty.match(prompt, 0, 100, out), 0);
}

TEST(PrefixIndex, UnreferencedBlocksQueueLeastRecentlyReleasedFirst) {
  PrefixIndex index(8, 1, 0);
  const std::uint64_t root = index.root(0);
  std::vector<BlockId> ids;
  for (std::int32_t t = 0; t < 4; ++t) ids.push_back(index.insert(root, Tokens{t}));
  EXPECT_EQ(index.lru(), PrefixIndex::kNone);
  index.add_ref(ids[0]);  // two holders
  EXPECT_EQ(index.refs(ids[0]), 2);
  index.drop_ref(ids[2]);
  index.drop_ref(ids[0]);
  index.drop_ref(ids[1]);
  EXPECT_EQ(index.num_unreferenced(), 2);  // ids[0] still has a holder
  EXPECT_EQ(index.lru(), ids[2]);
  index.drop_ref(ids[0]);  // newest
  index.add_ref(ids[2]);   // a hit takes it off the list
  EXPECT_EQ(index.lru(), ids[1]);
  EXPECT_EQ(index.num_unreferenced(), 2);
  index.drop_ref(ids[2]);  // back, as the newest
  std::vector<BlockId> order;
  while (index.lru() != PrefixIndex::kNone) {
    order.push_back(index.lru());
    index.evict(order.back());
    ASSERT_TRUE(index.check().ok());
  }
  EXPECT_EQ(order, (std::vector<BlockId>{ids[1], ids[0], ids[2]}));
  EXPECT_EQ(index.size(), 1);  // ids[3] is still held
  EXPECT_EQ(index.find(root, Tokens{1}), PrefixIndex::kNone);
  EXPECT_EQ(index.find(root, Tokens{3}), ids[3]);
  // Evicted ids come back from insert.
  EXPECT_NE(index.insert(root, Tokens{1}), PrefixIndex::kNone);
  EXPECT_TRUE(index.check().ok());
}

// Random inserts, holders and evictions against a std::map. A small token
// alphabet and one-token blocks make many blocks share probe runs, so
// deletion moves entries back often; every lookup and check() must agree
// with the model after each step.
TEST(PrefixIndex, AgreesWithAMapUnderManyInsertsAndEvictions) {
  for (const unsigned seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    constexpr int kCapacity = 96;
    constexpr int kBlockTokens = 2;
    PrefixIndex index(kCapacity, kBlockTokens, seed);
    struct Held {
      BlockId id;
      int refs;
    };
    using Key = std::tuple<std::uint64_t, std::int32_t, std::int32_t>;  // parent, tokens
    std::map<Key, Held> model;
    std::vector<std::uint64_t> parents{index.root(0), index.root(1)};
    std::vector<BlockId> lru;  // the model's LRU list, oldest first
    int evictions = 0;
    auto any_entry = [&]() {
      return std::next(model.begin(), uniform(0, static_cast<int>(model.size()) - 1));
    };
    for (int op = 0; op < 6000; ++op) {
      const std::uint64_t parent = parents[uniform(0, static_cast<int>(parents.size()) - 1)];
      const Tokens tokens{uniform(0, 7), uniform(0, 7)};
      const Key key{parent, tokens[0], tokens[1]};
      const int action = uniform(0, 9);
      if (action < 4 || model.empty()) {  // insert
        const BlockId id = index.insert(parent, tokens);
        if (model.contains(key) || static_cast<int>(model.size()) == kCapacity) {
          ASSERT_EQ(id, PrefixIndex::kNone);
        } else {
          ASSERT_NE(id, PrefixIndex::kNone);
          model[key] = {id, 1};
          // Its hash is a parent for later blocks: chains grow.
          if (parents.size() < 64) parents.push_back(index.hash(id));
        }
      } else if (action < 5) {  // a hit: one holder more
        Held& held = any_entry()->second;
        index.add_ref(held.id);
        if (held.refs++ == 0) std::erase(lru, held.id);
      } else if (action < 8) {  // a release: one holder less
        Held& held = any_entry()->second;
        if (held.refs > 0) {
          index.drop_ref(held.id);
          if (--held.refs == 0) lru.push_back(held.id);
        }
      } else if (!lru.empty()) {  // evict the oldest unreferenced block
        ASSERT_EQ(index.lru(), lru.front());
        const BlockId victim = lru.front();
        index.evict(victim);
        lru.erase(lru.begin());
        std::erase_if(model, [&](const auto& entry) { return entry.second.id == victim; });
        ++evictions;
      }
      const auto it = model.find(key);
      ASSERT_EQ(index.find(parent, tokens), it == model.end() ? PrefixIndex::kNone : it->second.id);
      ASSERT_EQ(index.size(), static_cast<int>(model.size()));
      ASSERT_EQ(index.num_unreferenced(), static_cast<int>(lru.size()));
      ASSERT_EQ(index.lru(), lru.empty() ? PrefixIndex::kNone : lru.front());
      for (const auto& [k, held] : model) {
        const Tokens t{std::get<1>(k), std::get<2>(k)};
        ASSERT_EQ(index.find(std::get<0>(k), t), held.id);
        ASSERT_EQ(index.refs(held.id), held.refs);
      }
      const Status status = index.check();
      ASSERT_TRUE(status.ok()) << status.to_string();
    }
    EXPECT_GT(evictions, 500);  // the table churned
  }
}

}  // namespace
}  // namespace vpod::kvcache
