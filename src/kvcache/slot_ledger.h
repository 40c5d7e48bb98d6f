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
//
// Prefix caching (when enabled; slot_prefix.cpp). A depth step holds the K/V
// of a whole token range of the slot (every layer with the all-layers
// layout), so it is the unit of sharing: a *block*, indexed by the chain hash
// of the tokens up to its end (PrefixIndex). Every page is in exactly one
// place: the free list, one slot's *private* steps, one indexed block, or in
// flight. A slot's steps [0, shared_steps) are blocks (its prompt's, or
// another request's it matched) and the rest are private, so a slot never
// writes a block: it only appends past it. A block's pages may be mapped in
// several slots at once (the same physical page at several addresses); its
// holders are the slots that map it, will map it (planned steps of an active
// slot, [depth, shared_steps)) or still have to unmap it (a truncation). An
// unreferenced block stays cached, unmapped, until eviction (LRU) hands its
// pages back to the free list; a block held only by idle slots is evicted by
// reclaiming their tails, or turned back into private pages when its only
// holder is reused by a request that does not match it (no driver call).
// When a request's plan conflicts with what a reused slot maps, the slot's
// tail is *truncated*: unmapped in the background, after the fence of its
// previous owner, before the slot grows again.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kvcache/kv_store.h"
#include "kvcache/page_pool.h"
#include "kvcache/prefix_index.h"

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
  std::int64_t count = 0;   // depth steps taken
  bool truncation = false;  // planned by acquire(): the slot has a new owner
};

// What acquiring a slot for a request would do (SlotLedger::plan_acquire):
// which slot, how many of the request's matched blocks it ends up sharing,
// and what that costs admission.
struct AcquirePlan {
  int slot = -1;
  std::int64_t shared_steps = 0;   // leading steps that are blocks (cached tokens / block)
  std::int64_t reused_steps = 0;   // of those, already mapped in the slot (no driver call)
  std::int64_t keep_depth = 0;     // the slot's depth once a truncation is planned
  std::int64_t private_steps = 0;  // steps past shared_steps the slot keeps (deferred reuse)
  std::int64_t newly_pinned = 0;   // matched blocks no active slot holds yet
  std::int64_t lost_blocks = 0;    // cached blocks only this slot holds that the plan evicts
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
    // Prefix caching: steps [0, shared_steps) are blocks (mapped below depth,
    // planned above it); `chain` is the hash of the last of them (or the
    // request's root); `index_more` is false once a step could not be indexed
    // (its block was already indexed by another slot), so blocks stay a prefix.
    std::int64_t shared_steps = 0;
    std::uint64_t chain = 0;
    bool index_more = false;
    std::int64_t truncating = 0;  // steps past depth still mapped, queued for unmapping
  };
  struct PrewarmStats {
    std::int64_t pages = 0;  // pages mapped into free slots ahead of acquire()
    std::int64_t hits = 0;   // acquisitions that got a slot holding some of them
  };

  SlotLedger() = default;
  // Every page of a pool of `num_pages` is free, page 0 on top. With
  // `prefix_caching`, depth steps of computed prompt tokens are indexed under
  // `prefix_salt` (requires whole tokens per page).
  SlotLedger(const PageGeometry& geometry, std::int64_t num_pages, bool prefix_caching = false,
             std::uint64_t prefix_salt = 0);

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
  // Without prefix caching only (with it, acquire(plan, ...) below).
  int acquire(std::int64_t need_depth);
  // Makes an active slot idle. With `unmap_all`, its whole depth goes in
  // flight and comes back as the victim to unmap (count 0 when it held none).
  Victim release(int slot, bool unmap_all);
  void note_used(int slot, std::int64_t tokens);
  int num_free_slots() const;
  // Pages that reclaiming idle slots other than `exclude_slot` (-1: none
  // excluded) and evicting cached blocks could return to the free list.
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
  // The pages of the slot's planned blocks for steps [from, from + count)
  // (all below shared_steps), region r's at out[r * stride + i].
  void planned_pages(int slot, std::int64_t from, std::int64_t count, std::size_t stride,
                     std::span<PageId> out) const;
  // Commits `count` depth steps (region r's pages are ids[r * count,
  // (r + 1) * count)) to the slot, which is at depth `from`; `fresh` of the
  // steps came from take_free (the others are the slot's planned blocks).
  // `prewarm`: mapped into a free slot for the next acquire().
  void commit(int slot, std::int64_t from, std::int64_t count, std::span<const PageId> ids,
              std::int64_t fresh, bool prewarm);
  // Growth rolled back: the pages taken by take_free return to the free list
  // in their original order (the last taken is pushed first, so the next
  // take gets them back).
  void give_back(std::span<const PageId> ids);

  // --- prefix caching (slot_prefix.cpp) ---
  bool prefix_caching() const { return prefix_caching_; }
  // Tokens of one block (one depth step); 0 without prefix caching.
  int block_tokens() const { return prefix_caching_ ? index_.block_tokens() : 0; }
  const PrefixIndex& index() const { return index_; }
  // Blocks with at least one active holder (admission counts each once).
  std::int64_t pinned_blocks() const { return pinned_; }
  std::int64_t evictions() const { return evictions_; }
  std::int64_t truncations() const { return truncations_; }
  // The request's matched blocks (at most max_blocks) into `out`.
  int match(std::span<const std::int32_t> tokens, std::uint64_t salt, int max_blocks,
            std::vector<PrefixIndex::BlockId>& out) const;
  // The slot acquire(need_depth, matched) would take, and at what cost.
  AcquirePlan plan_acquire(std::int64_t need_depth,
                           std::span<const PrefixIndex::BlockId> matched) const;
  // Activates the slot `plan` names for a new owner with `matched` (the
  // plan's shared_steps leading blocks) and cache salt; a truncation it needs
  // is appended to `truncations` (unmapped by the caller before the slot
  // grows). Returns the blocks newly pinned.
  std::int64_t acquire(const AcquirePlan& plan, std::span<const PrefixIndex::BlockId> matched,
                       std::uint64_t salt, std::vector<Victim>& truncations);
  // Indexes the slot's private steps below min(depth, tokens / block) whose
  // tokens `prompt` gives. Returns how many became blocks (each pinned).
  std::int64_t index_prompt(int slot, std::span<const std::int32_t> prompt);
  // A truncation planned by acquire() was unmapped: private pages return to
  // the free list, blocks lose this holder.
  void finish_truncation(const Victim& victim);
  // Hands the pages of the least recently used unreferenced block back to
  // the free list. False when no block is unreferenced.
  bool evict_one();
  // Blocks held by idle slots only (reclaimable by unmapping their tails).
  std::int64_t idle_only_blocks() const {
    return index_.size() - index_.num_unreferenced() - pinned_;
  }

  // --- capacity, in tokens (see KvStore) ---
  std::int64_t capacity_tokens() const;
  std::int64_t capacity_tokens(int slot) const;
  std::int64_t free_tokens() const;
  std::int64_t backed_tokens(int slot) const;
  // The per-slot fields of KvStats (pages, slots, tokens, bytes).
  void add_stats(KvStats& stats, std::int64_t bytes_per_token) const;

  // Each page in exactly one place (a slot's private steps, an indexed
  // block, the free list or in flight when `allow_in_flight`), every mapped
  // block step naming its block's pages, exact holder and pin counts, depths
  // in range, idle slots unused.
  Status check(bool allow_in_flight = false) const;

 private:
  void push_free(PageId id);
  bool is_block_step(int slot, std::int64_t step) const { return step < slots_[slot].shared_steps; }
  PrefixIndex::BlockId& step_block(int slot, std::int64_t step) {
    return step_blocks_[static_cast<std::size_t>(slot) * g_.max_depth + step];
  }
  PrefixIndex::BlockId step_block(int slot, std::int64_t step) const {
    return step_blocks_[static_cast<std::size_t>(slot) * g_.max_depth + step];
  }
  PageId& page_ref(int slot, int region, std::int64_t index) {
    return pages_[(static_cast<std::size_t>(slot) * g_.num_regions + region) * g_.max_depth +
                  index];
  }
  // Takes the slot's last `count` steps off it as a victim: private pages go
  // in flight, blocks keep the slot as a holder until return_tail.
  Victim take_tail(int slot, std::int64_t count);
  PrefixIndex::BlockId victim_block(int slot, std::int64_t step) const;
  void drop_holder(PrefixIndex::BlockId id, bool active);
  // How many of `matched` the free slot shares as it is, and whether it
  // must be truncated at keep_depth for them.
  AcquirePlan fit(int slot, std::span<const PrefixIndex::BlockId> matched) const;

  PageGeometry g_;
  std::vector<Slot> slots_;
  std::vector<PageId> pages_;          // [max_slots][num_regions][max_depth]
  std::vector<PageId> free_;           // LIFO
  std::vector<std::uint8_t> in_free_;  // [num_pages] 1 when in free_
  std::int64_t in_flight_ = 0;
  std::uint64_t release_counter_ = 0;
  PrewarmStats prewarm_;
  // Prefix caching.
  bool prefix_caching_ = false;
  PrefixIndex index_;
  std::vector<PrefixIndex::BlockId> step_blocks_;  // [max_slots][max_depth] below shared_steps
  // [max_slots][max_depth]: for steps being unmapped (a victim's), the block
  // each held, kNone for private pages.
  std::vector<PrefixIndex::BlockId> victim_blocks_;
  std::vector<PageId> block_pages_;         // [index capacity][num_regions]
  std::vector<std::int32_t> block_active_;  // [index capacity] active holders
  std::int64_t pinned_ = 0;
  std::int64_t evictions_ = 0;
  std::int64_t truncations_ = 0;
};

}  // namespace vpod::kvcache
