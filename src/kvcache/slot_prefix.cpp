// The SlotLedger's prefix cache (see "Prefix caching" in slot_ledger.h):
// matching, planning and taking a slot for a request that shares blocks,
// indexing a slot's computed prompt steps, and evicting cached blocks.
#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "common/check.h"
#include "kvcache/slot_ledger.h"

namespace vpod::kvcache {

int SlotLedger::match(std::span<const std::int32_t> tokens, std::uint64_t salt, int max_blocks,
                      std::vector<PrefixIndex::BlockId>& out) const {
  out.clear();
  if (!prefix_caching_ || max_blocks <= 0) return 0;
  return index_.match(tokens, salt, std::min<std::int64_t>(max_blocks, g_.max_depth), out);
}

void SlotLedger::drop_holder(PrefixIndex::BlockId id, bool active) {
  if (active && --block_active_[id] == 0) --pinned_;
  index_.drop_ref(id);
}

AcquirePlan SlotLedger::fit(int s, std::span<const PrefixIndex::BlockId> matched) const {
  const Slot& slot = slots_[s];
  const auto m = static_cast<std::int64_t>(matched.size());
  AcquirePlan plan{.slot = s, .shared_steps = m};
  std::int64_t j = 0;  // leading steps the slot already maps as the match's blocks
  while (j < std::min(slot.shared_steps, m) && step_block(s, j) == matched[j]) ++j;
  plan.reused_steps = j;
  plan.keep_depth = slot.depth;
  if (j < m) {
    // Its steps from j on are not the blocks the request needs there.
    plan.keep_depth = std::min(slot.depth, j);
  } else {
    // The request writes from step m on: a block there that another slot
    // maps cannot become this request's private page.
    for (std::int64_t i = m; i < std::min(slot.shared_steps, slot.depth); ++i) {
      if (index_.refs(step_block(s, i)) > 1) {
        plan.keep_depth = i;
        break;
      }
    }
  }
  plan.private_steps = std::max<std::int64_t>(0, plan.keep_depth - m);
  // Taking the slot drops its cached blocks from the first step the request
  // does not share on; those nobody else maps leave the cache.
  for (std::int64_t i = std::min(j, m); i < std::min(slot.shared_steps, slot.depth); ++i) {
    plan.lost_blocks += index_.refs(step_block(s, i)) == 1;
  }
  return plan;
}

AcquirePlan SlotLedger::plan_acquire(std::int64_t need_depth,
                                     std::span<const PrefixIndex::BlockId> matched) const {
  AcquirePlan best;
  // Most blocks already mapped first (no driver calls). Then, while the free
  // list holds the request's unshared steps, the fewest cached blocks lost:
  // the cache gives way to memory pressure, not to the mapping calls a fresh
  // slot costs (else each request without a hit would take the idle slot the
  // last one released and evict its prompt). Then no truncation, then the
  // best fit by depth as without prefix caching (the smallest surplus, else
  // the smallest shortfall), then the most recently released.
  const auto unshared = std::max<std::int64_t>(0, need_depth - std::ssize(matched));
  const bool room = num_free() >= unshared * g_.num_regions;
  std::tuple<std::int64_t, std::int64_t, int, int, std::int64_t, std::uint64_t> best_key;
  for (int s = 0; s < g_.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.active) continue;
    const AcquirePlan plan = fit(s, matched);
    const std::int64_t surplus = plan.keep_depth - need_depth;
    const auto key = std::make_tuple(-plan.reused_steps, room ? plan.lost_blocks : 0,
                                     plan.keep_depth < slot.depth ? 1 : 0, surplus >= 0 ? 0 : 1,
                                     surplus >= 0 ? surplus : -surplus, ~slot.release_order);
    if (best.slot < 0 || key < best_key) {
      best = plan;
      best_key = key;
    }
  }
  for (const PrefixIndex::BlockId id : matched) best.newly_pinned += block_active_[id] == 0;
  return best;
}

std::int64_t SlotLedger::acquire(const AcquirePlan& plan,
                                 std::span<const PrefixIndex::BlockId> matched, std::uint64_t salt,
                                 std::vector<Victim>& truncations) {
  const int s = plan.slot;
  Slot& slot = slots_[s];
  VPOD_CHECK(s >= 0 && !slot.active &&
             static_cast<std::int64_t>(matched.size()) == plan.shared_steps);
  const std::int64_t pinned_before = pinned_;
  if (slot.prewarmed && slot.depth > 0) ++prewarm_.hits;
  slot.prewarmed = false;
  slot.active = true;
  slot.used_tokens = 0;
  ++slot.generation;

  if (plan.keep_depth < slot.depth) {
    Victim victim = take_tail(s, slot.depth - plan.keep_depth);
    victim.truncation = true;
    slot.truncating += victim.count;
    ++truncations_;
    truncations.push_back(victim);
  }
  const std::int64_t m = plan.shared_steps;
  // Blocks past the match that only this slot holds become its private pages
  // again (evicted from the index; no driver call).
  for (std::int64_t i = m; i < std::min(slot.shared_steps, slot.depth); ++i) {
    const PrefixIndex::BlockId id = step_block(s, i);
    VPOD_CHECK(index_.refs(id) == 1);
    index_.drop_ref(id);
    index_.evict(id);
    ++evictions_;
  }
  slot.shared_steps = std::min(slot.shared_steps, m);
  // Blocks it maps already are now held by an active slot; the rest are planned.
  for (std::int64_t i = 0; i < m; ++i) {
    const PrefixIndex::BlockId id = matched[i];
    if (i >= slot.shared_steps) {
      step_block(s, i) = id;
      index_.add_ref(id);
    }
    if (block_active_[id]++ == 0) ++pinned_;
  }
  VPOD_CHECK(slot.shared_steps >= std::min(plan.reused_steps, m));
  slot.shared_steps = m;
  slot.chain = m > 0 ? index_.hash(matched[m - 1]) : index_.root(salt);
  slot.index_more = prefix_caching_;
  return pinned_ - pinned_before;
}

std::int64_t SlotLedger::index_prompt(int s, std::span<const std::int32_t> prompt) {
  Slot& slot = slots_[s];
  if (!prefix_caching_ || !slot.active || !slot.index_more) return 0;
  const int block = index_.block_tokens();
  const std::int64_t full =
      std::min<std::int64_t>(slot.depth, static_cast<std::int64_t>(prompt.size()) / block);
  std::int64_t indexed = 0;
  for (std::int64_t i = slot.shared_steps; i < full; ++i) {
    const auto tokens =
        prompt.subspan(static_cast<std::size_t>(i) * block, static_cast<std::size_t>(block));
    const PrefixIndex::BlockId id = index_.insert(slot.chain, tokens);
    if (id == PrefixIndex::kNone) {
      slot.index_more = false;  // indexed by another slot: this one keeps its copy private
      break;
    }
    for (int r = 0; r < g_.num_regions; ++r)
      block_pages_[static_cast<std::size_t>(id) * g_.num_regions + r] = page(s, r, i);
    step_block(s, i) = id;
    block_active_[id] = 1;
    ++pinned_;
    slot.chain = index_.hash(id);
    slot.shared_steps = i + 1;
    ++indexed;
  }
  return indexed;
}

void SlotLedger::planned_pages(int s, std::int64_t from, std::int64_t count, std::size_t stride,
                               std::span<PageId> out) const {
  VPOD_CHECK(from + count <= slots_[s].shared_steps);
  for (std::int64_t i = 0; i < count; ++i) {
    const auto id = static_cast<std::size_t>(step_block(s, from + i));
    for (int r = 0; r < g_.num_regions; ++r)
      out[r * stride + static_cast<std::size_t>(i)] = block_pages_[id * g_.num_regions + r];
  }
}

bool SlotLedger::evict_one() {
  const PrefixIndex::BlockId id = index_.lru();
  if (id == PrefixIndex::kNone) return false;
  for (int r = g_.num_regions; r > 0; --r)
    push_free(block_pages_[static_cast<std::size_t>(id) * g_.num_regions + r - 1]);
  index_.evict(id);
  ++evictions_;
  return true;
}

}  // namespace vpod::kvcache
