// The mapped memory of the vAttention cache: the virtual reservation, every
// physical page, each slot's mappings and fence, and the growth, reclamation
// and rollback that move pages between the pool and the slots. Bookkeeping is
// the SlotLedger's (pure logic); this class adds the driver calls around it.
//
// Two mutexes:
//   - the *state* mutex guards the ledger and the statistics, and is held
//     only for bookkeeping (never across driver calls or fence waits);
//   - the *mapping* mutex serializes all map/unmap work (ensure, the mapper
//     thread, reclaim, eager release) and is held across driver calls and
//     fence waits. Functions that need it take a MapLock to prove it is held.
// Lock order: mapping before state. (The mapper's queue mutex, kv_mapper.h,
// is taken before state and never together with mapping.)
//
// Pages a kernel may still read are never unmapped: reclaiming an idle
// slot's tail, or truncating a reused slot for its new owner (prefix
// caching), first waits on the fence recorded at its release. Truncations
// are queued by acquire() and unmapped by the next holder of the mapping
// mutex, before it maps anything. A grow that
// fails in region r unmaps regions 0..r-1 and returns the pages to the free
// list in their LIFO order; growth whose slot changed owner while it mapped
// is unmapped again (it was never within backed_tokens()).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kvcache/kv_store.h"
#include "kvcache/page_pool.h"
#include "kvcache/prefix_index.h"
#include "kvcache/slot_ledger.h"
#include "kvcache/vmm.h"

namespace vpod::kvcache {

class KvMemory {
 public:
  using MapLock = std::unique_lock<std::mutex>;

  // Reserves max_slots x num_regions slots of max_depth pages, creates
  // min(memory_bytes, that) bytes of pages and one fence per slot. With
  // `prefix_caching`, computed prompt steps are indexed under `prefix_salt`.
  static Result<std::unique_ptr<KvMemory>> create(std::shared_ptr<VmmProvider> provider,
                                                  const PageGeometry& geometry,
                                                  std::size_t memory_bytes, bool prefix_caching,
                                                  std::uint64_t prefix_salt);
  // Waits for every slot's readers (active slots' readers left no fence: all
  // device work), then unmaps, releases the pages and frees the range.
  ~KvMemory();
  KvMemory(const KvMemory&) = delete;
  KvMemory& operator=(const KvMemory&) = delete;

  VmmProvider& provider() const { return *provider_; }
  const PageGeometry& geometry() const { return geometry_; }
  // Start of the reservation: region r of slot s starts at
  // base() + (r * max_slots + s) * max_depth * page_bytes.
  std::byte* base() const { return range_.base(); }

  MapLock lock_mapping() const { return MapLock(map_mutex_); }
  // Runs f(ledger, counters) under the state mutex (bookkeeping only).
  template <class F>
  decltype(auto) with_state(F&& f) {
    std::lock_guard lock(state_mutex_);
    return f(ledger_, counters_);
  }
  template <class F>
  decltype(auto) with_state(F&& f) const {
    std::lock_guard lock(state_mutex_);
    return f(static_cast<const SlotLedger&>(ledger_), static_cast<const KvStats&>(counters_));
  }

  // Takes the free slot that best fits a request of `need_depth` steps whose
  // tokens start with `matched` blocks (empty: no prefix caching or no hit),
  // (at most max_blocks), for a new owner with the query's salt. -1 when
  // every slot is active. Truncations it needs are queued (unmapped before the slot grows).
  // Matching and acquiring happen under one lock, so no matched block can be
  // evicted in between. plan() is what acquire() would do now.
  AcquirePlan acquire(std::int64_t need_depth, const PrefixQuery& prefix, int max_blocks);
  AcquirePlan plan(std::int64_t need_depth, const PrefixQuery& prefix, int max_blocks) const;
  // Unmaps the truncations acquire() queued (waiting on each slot's fence).
  Status settle_truncations(const MapLock& map_lock);
  bool has_truncations() const;

  // Grows the slot to `target_depth` (no-op if it is there or `policy` no
  // longer holds). Steps the slot plans to share map their blocks' pages. Reclaims idle slots'
  // tails first if policy.reclaim and the free list is short; else resource_exhausted. `on_mapper`
  // counts the pages as the mapper thread's.
  Status grow(const MapLock& map_lock, int slot, std::int64_t target_depth, GrowPolicy policy,
              bool on_mapper);
  // Ends the slot's owner: records its fence on `last_reader`, keeps its
  // pages (deferred) or, with `eager`, waits for the fence and unmaps them.
  Status release(int slot, cudaStream_t last_reader, bool eager);
  // Unmaps up to `max_pages` pages (whole depth steps) from idle slots.
  Result<std::int64_t> reclaim_idle(std::int64_t max_pages);
  // One chunk (kPrewarmChunkPages) of pre-mapping: grows the free slot that
  // acquire(expected_tokens) would pick towards `first_tokens`, from free
  // pages only. Returns whether more remains to be mapped for that hint.
  bool prewarm_chunk(const MapLock& map_lock, std::int64_t expected_tokens,
                     std::int64_t first_tokens);
  static constexpr std::int64_t kPrewarmChunkPages = 16;

  // The ledger's invariants, and that every mapping agrees with its depth.
  Status check_invariants() const;

 private:
  explicit KvMemory(std::shared_ptr<VmmProvider> provider, const PageGeometry& geometry);
  Status init(std::size_t memory_bytes, bool prefix_caching, std::uint64_t prefix_salt);
  Mapping& mapping(int slot, int region) {
    return mappings_[static_cast<std::size_t>(slot) * geometry_.num_regions + region];
  }
  // Makes the free list hold `pages_needed` pages, evicting unreferenced
  // cached blocks and reclaiming idle slots' tails (never exclude_slot's) if
  // it must.
  Status take_from_idle(std::int64_t pages_needed, int exclude_slot);
  // Waits on each planned victim's fence, unmaps its tail, returns the pages.
  // On a failed fence wait, the unprocessed victims keep their pages.
  Status reclaim_victims();
  Status unmap_tail(const Victim& victim);

  const std::shared_ptr<VmmProvider> provider_;
  const PageGeometry geometry_;
  // Declared so that destruction unmaps (mappings_) before releasing pages
  // (pool_) before freeing the address range (range_).
  VirtualRange range_;
  PagePool pool_;
  std::vector<Mapping> mappings_;               // [max_slots][num_regions]; under map_mutex_
  std::vector<std::unique_ptr<Fence>> fences_;  // [max_slots] recorded at release

  mutable std::mutex map_mutex_;  // order: map_mutex_ before state_mutex_
  mutable std::mutex state_mutex_;
  SlotLedger ledger_;
  KvStats counters_;  // cumulative fields only
  // Scratch (under map_mutex_), sized once: no allocation per step.
  std::vector<PageId> scratch_ids_;
  std::vector<PageHandle> scratch_handles_;
  std::vector<Victim> scratch_victims_;
  std::vector<Victim> truncations_;          // queued by acquire(); under state_mutex_
  std::vector<Victim> scratch_truncations_;  // being unmapped; under map_mutex_
  std::vector<PageId> scratch_fresh_;        // growth's pages from the free list
  mutable std::vector<PrefixIndex::BlockId> scratch_matched_;  // under state_mutex_
};

}  // namespace vpod::kvcache
