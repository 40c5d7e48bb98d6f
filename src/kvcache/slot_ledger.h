// The vAttention cache's bookkeeping as pure logic (no driver calls, no
// locks), in the spirit of llama.cpp's llama-kv-cells.h: which physical page
// backs which depth of which region of which slot, which pages are free
// (last in, first out), which slots are active, idle (released, still holding
// their pages: deferred reclamation) or empty, and what capacity that leaves.
// KvMemory drives it under its state mutex around the driver calls; the CPU
// property tests drive it directly against a simple model.
//
// Pages move in *depth steps*: a slot at depth d has pages [0, d) mapped in
// each of its R regions, so growth and reclamation take R pages at a time.
// Between taking pages from the free list and committing them to a slot (or
// returning them), pages are *in flight*: counted by in_flight_pages(), owned
// by the grow or unmap that holds them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kvcache/kv_store.h"
#include "kvcache/page_pool.h"

namespace vpod::kvcache {

// Sizes of the vAttention cache, and the arithmetic between tokens and pages.
struct PageGeometry {
  std::size_t page_bytes = 0;
  std::size_t region_token_bytes = 0;  // one token in one region
  int num_regions = 0;
  int max_slots = 0;
  int max_ctx = 0;
  std::int64_t max_depth = 0;  // pages per region per slot

  // Pages per region needed to back `tokens`, and tokens `pages` back (a
  // token may straddle a page boundary).
  std::int64_t pages_for_tokens(std::int64_t tokens) const;
  std::int64_t tokens_for_pages(std::int64_t pages) const;
  // Tokens a slot at `depth` backs (capped at max_ctx).
  std::int64_t tokens_for_depth(std::int64_t depth) const;
};

// Tokens growth maps for a prepare() entry: its tokens plus `lookahead`, or
// up to its `ahead` target when `map_ahead` (background growth only: ahead
// rides on the lookahead), within max_ctx.
inline std::int64_t desired_tokens(const SlotTokens& entry, std::int64_t lookahead, int max_ctx,
                                   bool map_ahead) {
  const std::int64_t ahead = map_ahead ? entry.ahead : 0;
  return std::min<std::int64_t>(max_ctx, std::max(entry.tokens + lookahead, ahead));
}

// What a growth must still find true when it starts and when its pages are
// committed; growth whose condition no longer holds by then is unmapped again
// (its pages were never visible), so stale growth never reaches a new owner
// and a released slot's held depth never grows behind admission.
struct GrowPolicy {
  bool reclaim = true;       // may take pages from idle slots
  bool only_active = false;  // skip (ok) if the slot is not active
  bool only_free = false;    // skip (ok) if the slot is active (pre-mapping)
  // With only_active / only_free: also skip unless the slot still has the
  // generation (owner) it had when the growth was asked for (0 = any).
  std::uint64_t generation = 0;
};

// Depth steps planned to come off a slot's tail.
struct Victim {
  int slot = 0;
  std::int64_t new_depth = 0;
  std::int64_t count = 0;  // depth steps taken
};

class SlotLedger {
 public:
  struct Slot {
    bool active = false;
    std::int64_t depth = 0;        // pages mapped in each region
    std::int64_t used_tokens = 0;  // largest ensure/prepare target since acquire
    std::uint64_t release_order = 0;
    std::uint64_t generation = 0;  // bumped by acquire(): which owner holds it
    bool prewarmed = false;        // free, holding pages pre-mapped for the next acquire
  };
  struct PrewarmStats {
    std::int64_t pages = 0;  // pages mapped into free slots ahead of acquire()
    std::int64_t hits = 0;   // acquisitions that got a slot holding some of them
  };

  SlotLedger() = default;
  // Every page of a pool of `num_pages` is free, page 0 on top.
  SlotLedger(const PageGeometry& geometry, std::int64_t num_pages);

  const PageGeometry& geometry() const { return g_; }
  const Slot& slot(int s) const { return slots_[s]; }
  // The page at `index` of the slot's region `region` (index < depth).
  PageId page(int slot, int region, std::int64_t index) const;
  std::int64_t num_pages() const { return static_cast<std::int64_t>(in_free_.size()); }
  std::int64_t num_free() const { return static_cast<std::int64_t>(free_.size()); }
  bool is_free(PageId id) const { return in_free_[id] != 0; }
  std::int64_t in_flight_pages() const { return in_flight_; }
  const PrewarmStats& prewarm_stats() const { return prewarm_; }

  // --- slots ---
  // The free slot acquire() picks for `need_depth`: best fit by depth (the
  // smallest surplus if one covers it, else the smallest shortfall; ties go
  // to the most recently released), or -1 when every slot is active.
  int pick_free_slot(std::int64_t need_depth) const;
  // Activates pick_free_slot(need_depth) for a new owner; -1 if none.
  int acquire(std::int64_t need_depth);
  // Makes an active slot idle. With `unmap_all`, its whole depth goes in
  // flight and comes back as the victim to unmap (count 0 when it held none).
  Victim release(int slot, bool unmap_all);
  void note_used(int slot, std::int64_t tokens);
  int num_free_slots() const;
  // Pages held by idle slots other than `exclude_slot` (-1: none excluded).
  std::int64_t idle_pages(int exclude_slot) const;

  // --- reclamation ---
  // Plans up to `steps` depth steps off idle slots' tails, largest slot first
  // (ties: the longest released), never exclude_slot's. Lowers their depths,
  // puts the pages in flight, appends to `out` (cleared first). Returns the
  // steps planned.
  std::int64_t plan_victims(std::int64_t steps, int exclude_slot, std::vector<Victim>& out);
  // Unmapping a planned victim failed: the slot keeps its pages.
  void restore(const Victim& victim);
  // A planned victim was unmapped: its pages go back to the free list.
  void return_tail(const Victim& victim);

  // --- growth ---
  bool still_wanted(int slot, const GrowPolicy& policy) const;
  // Takes `ids.size()` pages off the free list into `ids`, in flight; false,
  // and nothing taken, if too few are free.
  bool take_free(std::span<PageId> ids);
  // Commits `count` depth steps taken by take_free (region r's pages are
  // ids[r * count, (r + 1) * count)) to the slot, which is at depth `from`.
  // `prewarm`: mapped into a free slot for the next acquire().
  void commit(int slot, std::int64_t from, std::int64_t count, std::span<const PageId> ids,
              bool prewarm);
  // Growth rolled back: the pages return to the free list in their original
  // order (the last taken is pushed first, so the next take gets them back).
  void give_back(std::span<const PageId> ids);

  // --- capacity, in tokens (see KvStore) ---
  std::int64_t capacity_tokens() const;
  std::int64_t capacity_tokens(int slot) const;
  std::int64_t free_tokens() const;
  std::int64_t backed_tokens(int slot) const;
  // The per-slot fields of KvStats (pages, slots, tokens, bytes).
  void add_stats(KvStats& stats, std::int64_t bytes_per_token) const;

  // Each page in exactly one place (a slot's region, the free list or in
  // flight when `allow_in_flight`), depths in range, idle slots unused.
  Status check(bool allow_in_flight = false) const;

 private:
  void push_free(PageId id);

  PageGeometry g_;
  std::vector<Slot> slots_;
  std::vector<PageId> pages_;          // [max_slots][num_regions][max_depth]
  std::vector<PageId> free_;           // LIFO
  std::vector<std::uint8_t> in_free_;  // [num_pages] 1 when in free_
  std::int64_t in_flight_ = 0;
  std::uint64_t release_counter_ = 0;
  PrewarmStats prewarm_;
};

}  // namespace vpod::kvcache
