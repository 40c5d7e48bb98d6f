// The prefix cache's index: blocks of computed K/V named, as vLLM names
// them, by a chain hash of every token up to the block's end (a block's hash
// is hash(parent's hash, its tokens); the chain starts from a root salted by
// the store and the request's cache salt). Each indexed block counts its
// holders; an unreferenced block waits in a least-recently-used list until
// the store evicts it. Both KV stores use it: the store owns the memory
// behind a block (vAttention: one depth step of pages; paged: one block) and
// keeps it by BlockId.
//
// Lookups compare the block's parent hash and tokens, not only the hash, so
// a 64-bit collision can never hand one prompt another's K/V.
//
// Pure logic: no locks (the store's lock guards it), and no allocation after
// construction (an open-addressing table and intrusive LRU links, all sized
// for `capacity` blocks up front).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace vpod::kvcache {

class PrefixIndex {
 public:
  using BlockId = std::int32_t;
  static constexpr BlockId kNone = -1;

  PrefixIndex() = default;
  // Room for `capacity` blocks of `block_tokens` tokens each. `store_salt`
  // names what the K/V are of (model, dtype, layout): chains of another store
  // salt never meet this one's.
  PrefixIndex(int capacity, int block_tokens, std::uint64_t store_salt);

  int block_tokens() const { return block_tokens_; }
  int capacity() const { return capacity_; }
  int size() const { return size_; }
  int num_unreferenced() const { return lru_size_; }

  // The hash a request's chain starts from.
  std::uint64_t root(std::uint64_t request_salt) const;
  // The hash of a block holding `tokens` right after the block hashed `parent`.
  static std::uint64_t chain(std::uint64_t parent, std::span<const std::int32_t> tokens);

  // The indexed block holding `tokens` after `parent`, or kNone.
  BlockId find(std::uint64_t parent, std::span<const std::int32_t> tokens) const;
  // The leading full blocks of `tokens` (at most `max_blocks`) indexed under
  // `request_salt`, in order, into `out` (cleared first). Changes nothing.
  int match(std::span<const std::int32_t> tokens, std::uint64_t request_salt, int max_blocks,
            std::vector<BlockId>& out) const;

  // Indexes a block with one holder (its creator). kNone, and nothing
  // indexed, when the same block is already indexed or the index is full:
  // the caller keeps its memory to itself.
  BlockId insert(std::uint64_t parent, std::span<const std::int32_t> tokens);
  std::uint64_t hash(BlockId id) const { return entries_[id].hash; }
  int refs(BlockId id) const { return entries_[id].refs; }
  bool indexed(BlockId id) const { return id >= 0 && id < capacity_ && entries_[id].used; }
  // A holder more; an unreferenced block leaves the LRU list.
  void add_ref(BlockId id);
  // A holder less; at zero the block joins the LRU list as its newest.
  void drop_ref(BlockId id);
  // The least recently released unreferenced block, or kNone.
  BlockId lru() const { return lru_head_; }
  // Forgets an unreferenced block; its id may come back from insert().
  void evict(BlockId id);

  // Table, refcounts and LRU list agree. For tests.
  Status check() const;

 private:
  struct Entry {
    std::uint64_t hash = 0;
    std::uint64_t parent = 0;
    int refs = 0;
    bool used = false;
    BlockId lru_prev = kNone;
    BlockId lru_next = kNone;
  };
  std::span<const std::int32_t> tokens_of(BlockId id) const {
    return {tokens_.data() + static_cast<std::size_t>(id) * block_tokens_,
            static_cast<std::size_t>(block_tokens_)};
  }
  bool same(BlockId id, std::uint64_t hash, std::uint64_t parent,
            std::span<const std::int32_t> tokens) const;
  void lru_unlink(BlockId id);
  void lru_push_back(BlockId id);
  void table_erase(std::size_t pos);

  int capacity_ = 0;
  int block_tokens_ = 0;
  std::uint64_t store_salt_ = 0;
  int size_ = 0;
  std::vector<Entry> entries_;        // [capacity]
  std::vector<std::int32_t> tokens_;  // [capacity][block_tokens]
  std::vector<BlockId> free_ids_;     // ids not indexed (a stack)
  std::vector<BlockId> table_;        // open addressing, linear probing; kNone = empty
  std::uint64_t mask_ = 0;
  BlockId lru_head_ = kNone;  // oldest
  BlockId lru_tail_ = kNone;  // newest
  int lru_size_ = 0;
};

}  // namespace vpod::kvcache
