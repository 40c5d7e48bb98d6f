// The prefix cache's block index (see prefix_index.h).
#include "kvcache/prefix_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "common/check.h"
#include "common/splitmix64.h"

namespace vpod::kvcache {

PrefixIndex::PrefixIndex(int capacity, int block_tokens, std::uint64_t store_salt)
    : capacity_(capacity),
      block_tokens_(block_tokens),
      store_salt_(store_salt),
      entries_(static_cast<std::size_t>(capacity)),
      tokens_(static_cast<std::size_t>(capacity) * block_tokens) {
  VPOD_CHECK(capacity >= 0 && block_tokens > 0);
  free_ids_.reserve(static_cast<std::size_t>(capacity));
  for (int id = capacity; id > 0; --id) free_ids_.push_back(id - 1);
  // At most half full, so probes stay short.
  const std::uint64_t slots = std::bit_ceil(std::max<std::uint64_t>(16, 2ull * capacity));
  table_.assign(slots, kNone);
  mask_ = slots - 1;
}

std::uint64_t PrefixIndex::root(std::uint64_t request_salt) const {
  return splitmix64(store_salt_ ^ splitmix64(request_salt));
}

std::uint64_t PrefixIndex::chain(std::uint64_t parent, std::span<const std::int32_t> tokens) {
  std::uint64_t h = parent;
  for (const std::int32_t t : tokens) h = splitmix64(h ^ static_cast<std::uint32_t>(t));
  return splitmix64(h ^ tokens.size());
}

bool PrefixIndex::same(BlockId id, std::uint64_t hash, std::uint64_t parent,
                       std::span<const std::int32_t> tokens) const {
  const Entry& e = entries_[id];
  if (e.hash != hash || e.parent != parent) return false;
  const std::span<const std::int32_t> held = tokens_of(id);
  return std::equal(held.begin(), held.end(), tokens.begin(), tokens.end());
}

PrefixIndex::BlockId PrefixIndex::find(std::uint64_t parent,
                                       std::span<const std::int32_t> tokens) const {
  if (static_cast<int>(tokens.size()) != block_tokens_ || size_ == 0) return kNone;
  const std::uint64_t hash = chain(parent, tokens);
  for (std::uint64_t pos = hash & mask_;; pos = (pos + 1) & mask_) {
    const BlockId id = table_[pos];
    if (id == kNone) return kNone;
    if (same(id, hash, parent, tokens)) return id;
  }
}

int PrefixIndex::match(std::span<const std::int32_t> tokens, std::uint64_t request_salt,
                       int max_blocks, std::vector<BlockId>& out) const {
  out.clear();
  if (size_ == 0) return 0;  // also a default-constructed index (block_tokens_ = 0)
  const int full = static_cast<int>(tokens.size()) / block_tokens_;
  const int limit = std::min(full, max_blocks);
  std::uint64_t parent = root(request_salt);
  for (int b = 0; b < limit; ++b) {
    const BlockId id = find(parent, tokens.subspan(static_cast<std::size_t>(b) * block_tokens_,
                                                   static_cast<std::size_t>(block_tokens_)));
    if (id == kNone) break;
    out.push_back(id);
    parent = entries_[id].hash;
  }
  return static_cast<int>(out.size());
}

PrefixIndex::BlockId PrefixIndex::insert(std::uint64_t parent,
                                         std::span<const std::int32_t> tokens) {
  VPOD_CHECK(static_cast<int>(tokens.size()) == block_tokens_);
  if (free_ids_.empty()) return kNone;
  const std::uint64_t hash = chain(parent, tokens);
  std::uint64_t pos = hash & mask_;
  for (; table_[pos] != kNone; pos = (pos + 1) & mask_) {
    if (same(table_[pos], hash, parent, tokens)) return kNone;  // already indexed
  }
  const BlockId id = free_ids_.back();
  free_ids_.pop_back();
  Entry& e = entries_[id];
  e = Entry{.hash = hash, .parent = parent, .refs = 1, .used = true};
  std::copy(tokens.begin(), tokens.end(),
            tokens_.begin() + static_cast<std::ptrdiff_t>(id) * block_tokens_);
  table_[pos] = id;
  ++size_;
  return id;
}

void PrefixIndex::add_ref(BlockId id) {
  Entry& e = entries_[id];
  VPOD_CHECK(e.used);
  if (e.refs++ == 0) lru_unlink(id);
}

void PrefixIndex::drop_ref(BlockId id) {
  Entry& e = entries_[id];
  VPOD_CHECK_MSG(e.used && e.refs > 0, fmt::format("prefix block {} released twice", id));
  if (--e.refs == 0) lru_push_back(id);
}

void PrefixIndex::evict(BlockId id) {
  Entry& e = entries_[id];
  VPOD_CHECK_MSG(e.used && e.refs == 0, fmt::format("evicting prefix block {} in use", id));
  lru_unlink(id);
  std::uint64_t pos = e.hash & mask_;
  while (table_[pos] != id) pos = (pos + 1) & mask_;
  table_erase(pos);
  e = Entry{};
  free_ids_.push_back(id);
  --size_;
}

// Backward-shift deletion: later entries of the probe run move up so every
// entry stays reachable from its home slot without tombstones.
void PrefixIndex::table_erase(std::size_t pos) {
  table_[pos] = kNone;
  for (std::uint64_t next = (pos + 1) & mask_; table_[next] != kNone; next = (next + 1) & mask_) {
    const std::uint64_t home = entries_[table_[next]].hash & mask_;
    // Move it into the hole unless its home lies cyclically in (pos, next].
    const bool stays = pos <= next ? (home > pos && home <= next) : (home > pos || home <= next);
    if (stays) continue;
    table_[pos] = table_[next];
    table_[next] = kNone;
    pos = next;
  }
}

void PrefixIndex::lru_unlink(BlockId id) {
  Entry& e = entries_[id];
  if (e.lru_prev != kNone)
    entries_[e.lru_prev].lru_next = e.lru_next;
  else if (lru_head_ == id)
    lru_head_ = e.lru_next;
  else
    return;  // not listed
  if (e.lru_next != kNone)
    entries_[e.lru_next].lru_prev = e.lru_prev;
  else
    lru_tail_ = e.lru_prev;
  e.lru_prev = e.lru_next = kNone;
  --lru_size_;
}

void PrefixIndex::lru_push_back(BlockId id) {
  Entry& e = entries_[id];
  e.lru_prev = lru_tail_;
  e.lru_next = kNone;
  if (lru_tail_ != kNone)
    entries_[lru_tail_].lru_next = id;
  else
    lru_head_ = id;
  lru_tail_ = id;
  ++lru_size_;
}

Status PrefixIndex::check() const {
  int used = 0;
  int unreferenced = 0;
  for (BlockId id = 0; id < capacity_; ++id) {
    const Entry& e = entries_[id];
    if (!e.used) continue;
    ++used;
    if (e.refs < 0) return internal_error(fmt::format("prefix block {} has {} refs", id, e.refs));
    if (e.refs == 0) ++unreferenced;
    if (find(e.parent, tokens_of(id)) != id) {
      return internal_error(fmt::format("prefix block {} is not reachable by its hash", id));
    }
  }
  // The table lists each indexed block once and nothing else.
  int listed_in_table = 0;
  for (const BlockId id : table_) {
    if (id == kNone) continue;
    if (id < 0 || id >= capacity_ || !entries_[id].used) {
      return internal_error(fmt::format("prefix table lists block {}, not indexed", id));
    }
    ++listed_in_table;
  }
  if (listed_in_table != size_) {
    return internal_error(
        fmt::format("prefix table lists {} blocks, the index holds {}", listed_in_table, size_));
  }
  if (used != size_ || used + static_cast<int>(free_ids_.size()) != capacity_) {
    return internal_error(fmt::format("prefix index: {} used, size {}, {} free ids, capacity {}",
                                      used, size_, free_ids_.size(), capacity_));
  }
  int listed = 0;
  BlockId prev = kNone;
  for (BlockId id = lru_head_; id != kNone; id = entries_[id].lru_next) {
    if (!entries_[id].used || entries_[id].refs != 0 || entries_[id].lru_prev != prev) {
      return internal_error(fmt::format("prefix block {} misplaced in the LRU list", id));
    }
    prev = id;
    if (++listed > capacity_) return internal_error("prefix LRU list has a cycle");
  }
  if (prev != lru_tail_ || listed != unreferenced || listed != lru_size_) {
    return internal_error(
        fmt::format("prefix LRU list holds {} of {} unreferenced blocks", listed, unreferenced));
  }
  return {};
}

}  // namespace vpod::kvcache
