// The vAttention cache's page/slot bookkeeping (pure logic; see slot_ledger.h).
#include "kvcache/slot_ledger.h"

#include <fmt/format.h>

#include <algorithm>
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

SlotLedger::SlotLedger(const PageGeometry& geometry, std::int64_t num_pages)
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
  Victim victim{slot_index, 0, 0};
  if (unmap_all && slot.depth > 0) {
    victim.count = slot.depth;
    slot.depth = 0;
    in_flight_ += victim.count * g_.num_regions;
  }
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
  std::int64_t pages = 0;
  for (int s = 0; s < g_.max_slots; ++s) {
    if (!slots_[s].active && s != exclude_slot) pages += slots_[s].depth * g_.num_regions;
  }
  return pages;
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
      if (slot.active || s == exclude_slot || slot.depth == 0) continue;
      if (pick < 0 || slot.depth > slots_[pick].depth ||
          (slot.depth == slots_[pick].depth && slot.release_order < slots_[pick].release_order)) {
        pick = s;
      }
    }
    if (pick < 0) break;
    Slot& slot = slots_[pick];
    const std::int64_t take = std::min(slot.depth, steps - planned);
    slot.depth -= take;
    if (slot.depth == 0) slot.prewarmed = false;
    in_flight_ += take * g_.num_regions;
    out.push_back(Victim{pick, slot.depth, take});
    planned += take;
  }
  return planned;
}

void SlotLedger::restore(const Victim& victim) {
  slots_[victim.slot].depth += victim.count;
  in_flight_ -= victim.count * g_.num_regions;
}

void SlotLedger::return_tail(const Victim& victim) {
  for (int r = 0; r < g_.num_regions; ++r) {
    for (std::int64_t i = victim.new_depth + victim.count; i > victim.new_depth; --i) {
      push_free(page(victim.slot, r, i - 1));
    }
  }
  in_flight_ -= victim.count * g_.num_regions;
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
                        std::span<const PageId> ids, bool prewarm) {
  Slot& slot = slots_[slot_index];
  VPOD_CHECK(slot.depth == from && from + count <= g_.max_depth &&
             ids.size() == static_cast<std::size_t>(count * g_.num_regions));
  for (int r = 0; r < g_.num_regions; ++r) {
    std::copy_n(ids.data() + r * count, count,
                pages_.data() +
                    (static_cast<std::size_t>(slot_index) * g_.num_regions + r) * g_.max_depth +
                    from);
  }
  slot.depth = from + count;
  in_flight_ -= static_cast<std::int64_t>(ids.size());
  if (prewarm) {
    slot.prewarmed = true;
    prewarm_.pages += static_cast<std::int64_t>(ids.size());
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
  if (!allow_in_flight && in_flight_ != 0) {
    return internal_error(fmt::format("{} KV pages in flight outside a grow", in_flight_));
  }
  std::vector<int> owner(in_free_.size(), -1);
  std::int64_t mapped = 0;
  for (int s = 0; s < g_.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.depth < 0 || slot.depth > g_.max_depth) {
      return internal_error(
          fmt::format("slot {} has depth {} (max {})", s, slot.depth, g_.max_depth));
    }
    for (int r = 0; r < g_.num_regions; ++r) {
      for (std::int64_t i = 0; i < slot.depth; ++i) {
        const PageId id = page(s, r, i);
        if (id >= owner.size())
          return internal_error(fmt::format("slot {} holds bad page {}", s, id));
        if (is_free(id)) {
          return internal_error(fmt::format("page {} is mapped in slot {} and free", id, s));
        }
        if (owner[id] != -1) {
          return internal_error(
              fmt::format("page {} is mapped twice (slots {} and {})", id, owner[id], s));
        }
        owner[id] = s;
        ++mapped;
      }
    }
    if (!slot.active && slot.used_tokens != 0) {
      return internal_error(fmt::format("idle slot {} has used tokens", s));
    }
  }
  if (mapped + num_free() + in_flight_ != num_pages()) {
    return internal_error(
        fmt::format("pool not conserved: {} mapped + {} free + {} in flight != {} pages", mapped,
                    num_free(), in_flight_, num_pages()));
  }
  return {};
}

}  // namespace vpod::kvcache
