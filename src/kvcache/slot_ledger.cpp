// The vAttention cache's page/slot bookkeeping (pure logic; see slot_ledger.h).
#include "kvcache/slot_ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include "common/check.h"

namespace vpod::kvcache {

std::int64_t PageGeometry::pages_for_tokens(std::int64_t tokens) const {
  const auto bytes = static_cast<std::size_t>(tokens) * region_token_bytes;
  return static_cast<std::int64_t>((bytes + page_bytes - 1) / page_bytes);
}

std::int64_t PageGeometry::tokens_for_pages(std::int64_t pages) const {
  return static_cast<std::int64_t>(static_cast<std::size_t>(pages) * page_bytes /
                                   region_token_bytes);
}

std::int64_t PageGeometry::tokens_for_depth(std::int64_t depth) const {
  return std::min<std::int64_t>(max_ctx, tokens_for_pages(depth));
}

SlotLedger::SlotLedger(const PageGeometry& geometry, std::int64_t num_pages, bool prefix_caching,
                       std::uint64_t prefix_salt)
    : g_(geometry),
      slots_(geometry.max_slots),
      pages_(
          static_cast<std::size_t>(geometry.max_slots) * geometry.num_regions * geometry.max_depth,
          0),
      in_free_(static_cast<std::size_t>(num_pages), 1) {
  // Pushed in reverse so page 0 is handed out first (addresses then follow
  // creation order in fresh runs, which makes dumps easier to read).
  free_.reserve(static_cast<std::size_t>(num_pages));
  for (std::int64_t i = num_pages; i > 0; --i) free_.push_back(static_cast<PageId>(i - 1));
  // A block must hold whole tokens: a token straddling two pages would have
  // its second half written by whoever maps the next page.
  prefix_caching_ = prefix_caching && g_.page_bytes % g_.region_token_bytes == 0;
  if (prefix_caching_) {
    const auto depth_cells = static_cast<std::size_t>(g_.max_slots) * g_.max_depth;
    const auto capacity = static_cast<int>(num_pages / g_.num_regions);
    index_ =
        PrefixIndex(capacity, static_cast<int>(g_.page_bytes / g_.region_token_bytes), prefix_salt);
    step_blocks_.assign(depth_cells, PrefixIndex::kNone);
    victim_blocks_.assign(depth_cells, PrefixIndex::kNone);
    block_pages_.assign(static_cast<std::size_t>(capacity) * g_.num_regions, 0);
    block_active_.assign(static_cast<std::size_t>(capacity), 0);
  }
}

PageId SlotLedger::page(int slot, int region, std::int64_t index) const {
  return pages_[(static_cast<std::size_t>(slot) * g_.num_regions + region) * g_.max_depth + index];
}

void SlotLedger::push_free(PageId id) {
  VPOD_CHECK(id < in_free_.size());
  VPOD_CHECK_MSG(in_free_[id] == 0, fmt::format("KV page {} returned to the pool twice", id));
  in_free_[id] = 1;
  free_.push_back(id);
}

// ----------------------------------------------------------------------------
// Slots
// ----------------------------------------------------------------------------
int SlotLedger::pick_free_slot(std::int64_t need) const {
  int best = -1;
  std::pair<int, std::int64_t> best_key{2, 0};
  std::uint64_t best_order = 0;
  for (int s = 0; s < g_.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.active) continue;
    const std::int64_t surplus = slot.depth - need;
    const std::pair<int, std::int64_t> key = surplus >= 0
                                                 ? std::pair<int, std::int64_t>{0, surplus}
                                                 : std::pair<int, std::int64_t>{1, -surplus};
    if (best < 0 || key < best_key || (key == best_key && slot.release_order > best_order)) {
      best = s;
      best_key = key;
      best_order = slot.release_order;
    }
  }
  return best;
}

int SlotLedger::acquire(std::int64_t need_depth) {
  VPOD_CHECK(!prefix_caching_);
  const int best = pick_free_slot(need_depth);
  if (best < 0) return -1;
  Slot& slot = slots_[best];
  if (slot.prewarmed && slot.depth > 0) ++prewarm_.hits;
  slot.prewarmed = false;
  slot.active = true;
  slot.used_tokens = 0;
  ++slot.generation;
  return best;
}

Victim SlotLedger::release(int slot_index, bool unmap_all) {
  Slot& slot = slots_[slot_index];
  VPOD_CHECK(slot.active);
  slot.active = false;
  slot.used_tokens = 0;
  slot.prewarmed = false;
  slot.release_order = ++release_counter_;
  if (prefix_caching_) {
    // Planned blocks never mapped lose their holder; mapped ones stay held,
    // idle (cached in place until the slot is reused or reclaimed).
    for (std::int64_t i = slot.shared_steps; i > slot.depth; --i)
      drop_holder(step_block(slot_index, i - 1), true);
    slot.shared_steps = std::min(slot.shared_steps, slot.depth);
    for (std::int64_t i = 0; i < slot.shared_steps; ++i) {
      const PrefixIndex::BlockId id = step_block(slot_index, i);
      if (--block_active_[id] == 0) --pinned_;
    }
    slot.index_more = false;
  }
  Victim victim{slot_index, 0, 0};
  if (unmap_all && slot.depth > 0) victim = take_tail(slot_index, slot.depth);
  return victim;
}

void SlotLedger::note_used(int slot, std::int64_t tokens) {
  slots_[slot].used_tokens = std::max(slots_[slot].used_tokens, tokens);
}

int SlotLedger::num_free_slots() const {
  int free = 0;
  for (const Slot& slot : slots_) free += slot.active ? 0 : 1;
  return free;
}

std::int64_t SlotLedger::idle_pages(int exclude_slot) const {
  // Idle slots' private steps, and every block no active slot holds (cached
  // unmapped, or mapped by idle slots only): each block's pages count once.
  std::int64_t steps = prefix_caching_ ? index_.size() - pinned_ : 0;
  for (int s = 0; s < g_.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (!slot.active && s != exclude_slot) steps += slot.depth - slot.shared_steps;
  }
  return steps * g_.num_regions;
}

// ----------------------------------------------------------------------------
// Reclamation
// ----------------------------------------------------------------------------
std::int64_t SlotLedger::plan_victims(std::int64_t steps, int exclude_slot,
                                      std::vector<Victim>& out) {
  out.clear();
  std::int64_t planned = 0;
  while (planned < steps) {
    int pick = -1;
    for (int s = 0; s < g_.max_slots; ++s) {
      const Slot& slot = slots_[s];
      if (slot.active || s == exclude_slot || slot.depth == 0 || slot.truncating > 0) continue;
      if (pick < 0 || slot.depth > slots_[pick].depth ||
          (slot.depth == slots_[pick].depth && slot.release_order < slots_[pick].release_order)) {
        pick = s;
      }
    }
    if (pick < 0) break;
    const std::int64_t take = std::min(slots_[pick].depth, steps - planned);
    out.push_back(take_tail(pick, take));
    if (slots_[pick].depth == 0) slots_[pick].prewarmed = false;
    planned += take;
  }
  return planned;
}

Victim SlotLedger::take_tail(int slot_index, std::int64_t count) {
  Slot& slot = slots_[slot_index];
  const std::int64_t from = slot.depth - count;
  for (std::int64_t i = from; i < slot.depth; ++i) {
    const bool block = is_block_step(slot_index, i);
    if (prefix_caching_)
      victim_blocks_[static_cast<std::size_t>(slot_index) * g_.max_depth + i] =
          block ? step_block(slot_index, i) : PrefixIndex::kNone;
    if (!block) in_flight_ += g_.num_regions;
  }
  slot.shared_steps = std::min(slot.shared_steps, from);
  slot.depth = from;
  return Victim{slot_index, from, count};
}

PrefixIndex::BlockId SlotLedger::victim_block(int slot, std::int64_t step) const {
  return prefix_caching_ ? victim_blocks_[static_cast<std::size_t>(slot) * g_.max_depth + step]
                         : PrefixIndex::kNone;
}

void SlotLedger::restore(const Victim& victim) {
  VPOD_CHECK(!victim.truncation);
  Slot& slot = slots_[victim.slot];
  VPOD_CHECK(slot.depth == victim.new_depth);
  for (std::int64_t i = victim.new_depth; i < victim.new_depth + victim.count; ++i) {
    const PrefixIndex::BlockId id = victim_block(victim.slot, i);
    if (id == PrefixIndex::kNone) {
      in_flight_ -= g_.num_regions;
    } else if (slot.shared_steps == i) {
      ++slot.shared_steps;  // blocks are a prefix: the steps above were blocks too
    }
  }
  slot.depth += victim.count;
}

void SlotLedger::return_tail(const Victim& victim) {
  const std::int64_t top = victim.new_depth + victim.count;
  for (int r = 0; r < g_.num_regions; ++r) {
    for (std::int64_t i = top; i > victim.new_depth; --i) {
      if (victim_block(victim.slot, i - 1) == PrefixIndex::kNone)
        push_free(page(victim.slot, r, i - 1));
    }
  }
  for (std::int64_t i = top; i > victim.new_depth; --i) {
    const PrefixIndex::BlockId id = victim_block(victim.slot, i - 1);
    if (id != PrefixIndex::kNone)
      drop_holder(id, false);
    else
      in_flight_ -= g_.num_regions;
  }
  if (victim.truncation) slots_[victim.slot].truncating -= victim.count;
}

// ----------------------------------------------------------------------------
// Growth
// ----------------------------------------------------------------------------
bool SlotLedger::still_wanted(int slot_index, const GrowPolicy& policy) const {
  const Slot& slot = slots_[slot_index];
  const bool same_owner = policy.generation == 0 || slot.generation == policy.generation;
  if (policy.only_active && (!slot.active || !same_owner)) return false;
  if (policy.only_free && (slot.active || !same_owner)) return false;
  return true;
}

bool SlotLedger::take_free(std::span<PageId> ids) {
  if (ids.size() > free_.size()) return false;
  for (PageId& id : ids) {
    id = free_.back();
    free_.pop_back();
    in_free_[id] = 0;
  }
  in_flight_ += static_cast<std::int64_t>(ids.size());
  return true;
}

void SlotLedger::commit(int slot_index, std::int64_t from, std::int64_t count,
                        std::span<const PageId> ids, std::int64_t fresh, bool prewarm) {
  Slot& slot = slots_[slot_index];
  VPOD_CHECK(slot.depth == from && from + count <= g_.max_depth &&
             ids.size() == static_cast<std::size_t>(count * g_.num_regions) && fresh <= count &&
             (fresh == count || from + (count - fresh) <= slot.shared_steps));
  for (int r = 0; r < g_.num_regions; ++r) {
    std::copy_n(ids.data() + r * count, count,
                pages_.data() +
                    (static_cast<std::size_t>(slot_index) * g_.num_regions + r) * g_.max_depth +
                    from);
  }
  slot.depth = from + count;
  in_flight_ -= fresh * g_.num_regions;
  if (prewarm) {
    slot.prewarmed = true;
    prewarm_.pages += fresh * g_.num_regions;
  }
}

void SlotLedger::give_back(std::span<const PageId> ids) {
  for (std::size_t i = ids.size(); i > 0; --i) push_free(ids[i - 1]);
  in_flight_ -= static_cast<std::int64_t>(ids.size());
}

// ----------------------------------------------------------------------------
// Capacity
// ----------------------------------------------------------------------------
std::int64_t SlotLedger::capacity_tokens() const {
  const std::int64_t pool_tokens = g_.tokens_for_pages(num_pages() / g_.num_regions);
  return std::min<std::int64_t>(pool_tokens, static_cast<std::int64_t>(g_.max_slots) * g_.max_ctx);
}

std::int64_t SlotLedger::capacity_tokens(int slot) const {
  const std::int64_t available = num_free() + idle_pages(slot);
  return g_.tokens_for_depth(slots_[slot].depth + available / g_.num_regions);
}

std::int64_t SlotLedger::free_tokens() const {
  const std::int64_t available = num_free() + idle_pages(-1);
  return g_.tokens_for_pages(available / g_.num_regions);
}

std::int64_t SlotLedger::backed_tokens(int slot) const {
  return g_.tokens_for_depth(slots_[slot].depth);
}

void SlotLedger::add_stats(KvStats& stats, std::int64_t bytes_per_token) const {
  stats.pages_total = num_pages();
  stats.pages_free = num_free();
  for (const Slot& slot : slots_) {
    const std::int64_t pages = slot.depth * g_.num_regions;
    stats.pages_mapped += pages;
    if (!slot.active) {
      stats.pages_idle += pages;
      ++stats.free_slots;
      continue;
    }
    ++stats.active_slots;
    stats.tokens_backed += g_.tokens_for_depth(slot.depth);
    stats.tokens_used += slot.used_tokens;
    stats.bytes_backed += pages * static_cast<std::int64_t>(g_.page_bytes);
    stats.bytes_used += slot.used_tokens * bytes_per_token;
  }
  stats.internal_fragmentation =
      stats.bytes_backed > 0
          ? 1.0 - static_cast<double>(stats.bytes_used) / static_cast<double>(stats.bytes_backed)
          : 0.0;
}

Status SlotLedger::check(bool allow_in_flight) const {
  // Pages of truncations not yet unmapped are in flight (private) or still
  // held by their block (kNone in victim_blocks_ marks private).
  std::int64_t truncating_pages = 0;
  for (int s = 0; s < g_.max_slots; ++s) {
    for (std::int64_t i = 0; i < slots_[s].truncating; ++i) {
      if (victim_block(s, slots_[s].depth + i) == PrefixIndex::kNone)
        truncating_pages += g_.num_regions;
    }
  }
  if (!allow_in_flight && in_flight_ != truncating_pages) {
    return internal_error(fmt::format("{} KV pages in flight outside a grow ({} truncating)",
                                      in_flight_, truncating_pages));
  }
  // owner: -1 nobody, s >= 0 slot s's private step, -2 an indexed block.
  std::vector<int> owner(in_free_.size(), -1);
  const auto claim = [&](PageId id, int who, std::string_view what) -> Status {
    if (id >= owner.size()) return internal_error(fmt::format("{} holds bad page {}", what, id));
    if (is_free(id)) return internal_error(fmt::format("page {} is in {} and free", id, what));
    if (owner[id] != -1) {
      return internal_error(
          fmt::format("page {} is in {} and elsewhere ({})", id, what, owner[id]));
    }
    owner[id] = who;
    return {};
  };
  std::int64_t owned = 0;
  std::vector<int> holders(static_cast<std::size_t>(index_.capacity()), 0);
  std::vector<int> active(static_cast<std::size_t>(index_.capacity()), 0);
  for (int s = 0; s < g_.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.depth < 0 || slot.depth + slot.truncating > g_.max_depth) {
      return internal_error(fmt::format("slot {} has depth {} + {} truncating (max {})", s,
                                        slot.depth, slot.truncating, g_.max_depth));
    }
    if (slot.shared_steps > slot.depth && !slot.active) {
      return internal_error(fmt::format("idle slot {} plans blocks", s));
    }
    for (std::int64_t i = 0; i < std::max(slot.depth, slot.shared_steps); ++i) {
      if (i < slot.shared_steps) {
        const PrefixIndex::BlockId id = step_block(s, i);
        if (!index_.indexed(id))
          return internal_error(fmt::format("slot {} step {} names no block", s, i));
        ++holders[id];
        if (slot.active) ++active[id];
        for (int r = 0; r < g_.num_regions && i < slot.depth; ++r) {
          if (page(s, r, i) != block_pages_[static_cast<std::size_t>(id) * g_.num_regions + r]) {
            return internal_error(
                fmt::format("slot {} step {} maps a page not of block {}", s, i, id));
          }
        }
        continue;
      }
      for (int r = 0; r < g_.num_regions; ++r) {
        VPOD_RETURN_IF_ERROR(claim(page(s, r, i), s, fmt::format("slot {}", s)));
        ++owned;
      }
    }
    for (std::int64_t i = slot.depth; i < slot.depth + slot.truncating; ++i) {
      const PrefixIndex::BlockId id = victim_block(s, i);
      if (id != PrefixIndex::kNone) ++holders[id];
    }
    if (!slot.active && slot.used_tokens != 0) {
      return internal_error(fmt::format("idle slot {} has used tokens", s));
    }
  }
  std::int64_t pinned = 0;
  for (PrefixIndex::BlockId id = 0; id < index_.capacity(); ++id) {
    if (!index_.indexed(id)) {
      if (block_active_[id] != 0) return internal_error(fmt::format("free block {} active", id));
      continue;
    }
    for (int r = 0; r < g_.num_regions; ++r) {
      VPOD_RETURN_IF_ERROR(claim(block_pages_[static_cast<std::size_t>(id) * g_.num_regions + r],
                                 -2, fmt::format("block {}", id)));
      ++owned;
    }
    if (index_.refs(id) != holders[id] || block_active_[id] != active[id]) {
      return internal_error(fmt::format("block {}: {} refs, {} active; slots hold {}, {} active",
                                        id, index_.refs(id), block_active_[id], holders[id],
                                        active[id]));
    }
    pinned += active[id] > 0 ? 1 : 0;
  }
  if (pinned != pinned_) {
    return internal_error(fmt::format("{} blocks pinned, counted {}", pinned, pinned_));
  }
  if (prefix_caching_) VPOD_RETURN_IF_ERROR(index_.check());
  if (owned + num_free() + in_flight_ != num_pages()) {
    return internal_error(
        fmt::format("pool not conserved: {} owned + {} free + {} in flight != {} pages", owned,
                    num_free(), in_flight_, num_pages()));
  }
  return {};
}

}  // namespace vpod::kvcache
