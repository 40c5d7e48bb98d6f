// The vAttention KV cache. Each slot (one running request) owns a virtually
// contiguous K and V that attention kernels read as plain strided tensors;
// physical pages from a pool created up front are mapped under them only as
// tokens arrive, in the background, and stay with the slot after its request
// ends until another slot needs them.
//
// Memory layout. One virtual reservation holds R regions (R = 2 for
// all-layers: K, V; R = 2 * layers for per-layer: K0, V0, K1, V1, ...), each
// `[max_slots, slot_bytes]`, where slot_bytes = max_ctx * token bytes of the
// region rounded UP to the page size (the padding is explicit in the slot
// stride; nothing relies on max_ctx * bytes being a page multiple):
//   all-layers (default): K, V each [max_slots, max_ctx, layers, kv_heads, head_dim]
//   per-layer:            K_l, V_l each [max_slots, max_ctx, kv_heads, head_dim]
// A slot backed to depth d has the first d pages of each of its R regions
// mapped, so its first floor(d * page_bytes / region_token_bytes) tokens (of
// every layer) are readable. With Llama-3-8B shapes and 2 MiB pages, one
// all-layers page holds 32 tokens of all 32 layers: a 1-token request costs 2
// pages (4 MiB), where per-layer costs 64 pages (128 MiB). docs/kvcache.md
// has the numbers.
//
// Growth. ensure(slot, n) maps synchronously on the calling thread.
// prepare(next) hands the growth the next step needs (+ lookahead_tokens, or
// up to an entry's `ahead` target, e.g. a prompt's next prefill chunk) to
// one mapper thread and returns a ticket; wait(ticket) blocks (condition
// variable) until the ticket's required tokens are backed and returns the
// Status if they could not be. A ticket can be waited on (any number of
// times) until 1024 newer prepare() calls have been made. Lookahead is best effort: it never
// reclaims, never fails a wait, and is dropped when a newer prepare() arrives, so the step thread
// never waits for mapping that only a later step needs.
//
// Eager allocation. expect_acquire(expected, first) says what the next
// acquire() will likely be; when the mapper has nothing a step needs, it maps
// the free slot that acquire(expected) would pick (best fit, below) to the
// depth of `first` tokens (the request's first prefill chunk), from free pool
// pages only, a chunk at a time. The engine passes the waiting queue's head
// with each step's prepare(), so the step that admits it finds its first
// chunk mapped instead of mapping ~128 pages (2048 Llama-3-8B tokens) on the
// critical path. The slot stays free: those pages are held like a released
// slot's (reclaimable, never promised), and settle_prewarm() stops the
// pre-mapping before admission reads free slots' depths and acquires.
//
// Reclamation. release() keeps the slot's pages mapped (deferred
// reclamation); acquire() picks the free slot whose mapped depth best fits
// the new request. When the pool is empty, growth takes pages from the tails
// of idle slots (largest first), after waiting on the fence recorded at their
// release, so pages a kernel may still read are never unmapped. With
// ReclaimPolicy::eager, release() unmaps everything at once instead.
//
// Thread-safety. Every public method is safe to call from any thread,
// concurrently with each other and with the mapper thread:
//   - a state mutex guards slot bookkeeping, the pool and statistics and is
//     held only for bookkeeping (never across driver calls or fence waits);
//   - a mapping mutex serializes all map/unmap work (ensure, the mapper,
//     reclaim, eager release) and is held across driver calls and fence
//     waits, so ensure() may wait for the mapper's current growth step;
//   - a queue mutex and two condition variables carry prepare() -> mapper ->
//     wait(); the mapper never spins and is joined by the destructor;
//   - posted growth is tagged with the slot's owner (a generation bumped by
//     acquire()), so growth a released slot's old owner asked for is dropped
//     and never lands on the slot's next owner. The tag is checked again
//     when mapped pages are committed to the slot: growth whose slot was
//     released or re-acquired while it mapped (lookahead of an active slot,
//     or pre-mapping of a free one) is unmapped again - its pages were never
//     within backed_tokens(), so no reader saw them. Hence a free slot's
//     depth changes only by reclamation and by pre-mapping, and the latter
//     stops at settle_prewarm() until the next expect_acquire().
// Memory of a slot is readable only up to backed_tokens(slot); the views are
// immutable for the cache's lifetime. Destroying the cache synchronizes with
// all GPU work first (readers of active slots have no fence).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/kv_view.h"
#include "kvcache/kv_store.h"
#include "kvcache/page_pool.h"
#include "kvcache/vmm.h"

namespace vpod::kvcache {

enum class KvLayout : std::uint8_t { all_layers, per_layer };
enum class ReclaimPolicy : std::uint8_t { deferred, eager };
enum class GrowthMode : std::uint8_t { background, synchronous };

std::string_view kv_layout_name(KvLayout layout);  // "all-layers" | "per-layer"
Result<KvLayout> parse_kv_layout(std::string_view name);

struct KvCacheConfig {
  KvShape shape;
  KvLayout layout = KvLayout::all_layers;
  int max_slots = 0;
  int max_ctx = 0;  // tokens addressable per slot
  // Physical budget: floor(memory / page) pages, capped at what max_slots
  // slots of max_ctx tokens can map (a larger budget would idle).
  std::size_t memory_bytes = 0;
  ReclaimPolicy reclaim = ReclaimPolicy::deferred;
  GrowthMode growth = GrowthMode::background;
  std::int64_t lookahead_tokens = 0;  // mapped ahead of prepare()'s targets
  // Background mode: expect_acquire() pre-maps the next request's first pages
  // (eager allocation). false ignores the hints (for comparison).
  bool eager_allocation = true;
};

class KvCache final : public KvStore {
 public:
  // Reserves the virtual range, creates every page of the budget and, in
  // background mode, starts the mapper thread. The cache shares ownership of
  // the provider.
  static Result<std::unique_ptr<KvCache>> create(const KvCacheConfig& config,
                                                 std::shared_ptr<VmmProvider> provider);
  ~KvCache() override;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheConfig& config() const { return config_; }
  VmmProvider& provider() const { return *provider_; }
  std::size_t page_bytes() const { return page_bytes_; }
  int num_regions() const { return num_regions_; }
  // Bytes of one token in one region, and of one slot in one region (padded).
  std::size_t region_token_bytes() const { return region_token_bytes_; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  // Pages per region needed to back `tokens`, and tokens `pages` back.
  std::int64_t pages_for_tokens(std::int64_t tokens) const;
  std::int64_t tokens_for_pages(std::int64_t pages) const;
  // Pages mapped per region for this slot (its depth).
  std::int64_t slot_depth(int slot) const;

  // Layer `layer`'s K/V as strided tensors over all slots.
  KvLayerView layer_view(int layer) const;

  // KvStore.
  int max_slots() const override { return config_.max_slots; }
  int max_ctx() const override { return config_.max_ctx; }
  Result<int> acquire(std::int64_t expected_tokens) override;
  Status release(int slot, cudaStream_t last_reader) override;
  Status ensure(int slot, std::int64_t tokens) override;
  Result<PrepareTicket> prepare(std::span<const SlotTokens> next) override;
  Status wait(PrepareTicket ticket) override;
  std::int64_t capacity_tokens() const override;
  std::int64_t capacity_tokens(int slot) const override;
  std::int64_t free_tokens() const override;
  std::int64_t backed_tokens(int slot) const override;
  int num_free_slots() const override;
  KvStats stats() const override;

  // Eager allocation for the request not yet admitted. Says that the next
  // acquire() will likely be acquire(expected_tokens) and that its first step
  // needs its first `first_tokens` tokens (the first prefill chunk). In
  // background mode the mapper, when it has nothing else to do, maps the free
  // slot that acquire(expected_tokens) would pick to that depth (never beyond
  // expected_tokens), in chunks of about kPrewarmChunkPages pages, from free
  // pool pages only: it never reclaims and stops when the pool runs dry. The
  // slot stays free, so its pages are held like any idle slot's (reclaimable
  // by others' growth, counted by free_tokens()). A new hint replaces the
  // previous one; 0 tokens cancels. No-op in synchronous mode.
  void expect_acquire(std::int64_t expected_tokens, std::int64_t first_tokens);
  // Cancels the hint and returns once no pre-mapping chunk is in flight: until
  // the next expect_acquire(), free slots' depths change only by reclamation
  // (which only required growth and reclaim_idle do), so an admission decision
  // taken on slot_depth() of free slots holds at acquire(). Waits at most one
  // chunk; returns at once in synchronous mode.
  void settle_prewarm();
  // Pages the mapper mapped into free slots ahead of acquire(), and how many
  // acquire() calls got a slot holding some of them.
  struct PrewarmStats {
    std::int64_t pages = 0;
    std::int64_t hits = 0;
  };
  PrewarmStats prewarm_stats() const;
  static constexpr std::int64_t kPrewarmChunkPages = 16;

  // Blocks until the mapper has finished all posted work, lookahead and
  // pre-mapping included (returns at once in synchronous mode). For tests,
  // benchmarks, shutdown.
  void drain();
  // Unmaps up to `max_pages` pages from idle slots' tails back into the pool
  // (whole depth steps, so a multiple of num_regions()); returns how many.
  Result<std::int64_t> reclaim_idle(std::int64_t max_pages);
  // The slot's pages, region-major ([region][depth]); for tests and dumps.
  std::vector<PageId> slot_pages(int slot) const;
  // Checks every bookkeeping invariant (each page in exactly one place, pool
  // conservation, mappings agree with depths). For tests; takes both locks.
  Status check_invariants() const;

 private:
  struct Slot {
    bool active = false;
    std::int64_t depth = 0;        // pages mapped in each region
    std::int64_t used_tokens = 0;  // largest ensure/prepare target since acquire
    std::uint64_t release_order = 0;
    std::uint64_t generation = 0;   // bumped by acquire(): which owner holds it
    std::vector<PageId> pages;      // [num_regions][max_depth]
    std::vector<Mapping> mappings;  // [num_regions]; touched only under map_mutex_
    std::unique_ptr<Fence> fence;   // recorded at release
    bool prewarmed = false;         // free, holding pages expect_acquire() had mapped
  };
  struct GrowPolicy {
    bool reclaim = true;       // may take pages from idle slots
    bool only_active = false;  // skip (ok) if the slot is not active
    bool only_free = false;    // skip (ok) if the slot is active (pre-mapping)
    // With only_active / only_free: also skip unless the slot still has the
    // generation (owner) it had when the growth was asked for (0 = any).
    // Checked before mapping and again when the pages are committed to the
    // slot: growth whose condition no longer holds by then is unmapped again
    // (its pages were never visible), so stale growth never reaches a new
    // owner and a released slot's held depth never grows behind admission.
    std::uint64_t generation = 0;
  };
  struct Victim {
    int slot = 0;
    std::int64_t new_depth = 0;
    std::int64_t count = 0;  // depth steps taken
  };

  KvCache(const KvCacheConfig& config, std::shared_ptr<VmmProvider> provider);
  Status init();

  Status check_slot(int slot) const;
  Status check_tokens(std::int64_t tokens) const;
  // Growth/shrink; the caller holds map_mutex_.
  Status grow(int slot, std::int64_t target_depth, GrowPolicy policy, bool on_mapper);
  // Makes the pool hold `pages_needed` free pages, reclaiming idle slots'
  // tails (never exclude_slot's) if it must.
  Status take_from_idle(std::int64_t pages_needed, int exclude_slot);
  // Takes depth steps from idle slots' tails, largest slot first, until
  // `steps` are planned; fills scratch_victims_ and lowers their depths.
  // Caller holds state_mutex_ (and map_mutex_). Returns the steps planned.
  std::int64_t plan_victims_locked(std::int64_t steps, int exclude_slot);
  // Waits on each planned victim's fence, unmaps its tail, returns the pages
  // to the pool. On a failed fence wait, the unprocessed victims keep their
  // pages (depth restored) and the Status is returned.
  Status reclaim_victims();
  Status unmap_tail(const Victim& victim);
  // Caller holds state_mutex_.
  std::int64_t idle_pages_locked(int exclude_slot) const;
  std::int64_t tokens_for_depth(std::int64_t depth) const;
  // The free slot acquire() picks for `need` pages per region, or -1.
  // Caller holds state_mutex_.
  int pick_free_slot_locked(std::int64_t need) const;
  // One chunk of pre-mapping for the hint; the caller holds map_mutex_.
  // Returns whether more remains to be mapped for it.
  bool prewarm_chunk(std::int64_t expected_tokens, std::int64_t first_tokens);

  void mapper_main();

  const KvCacheConfig config_;
  const std::shared_ptr<VmmProvider> provider_;
  std::size_t page_bytes_ = 0;
  int num_regions_ = 0;
  std::size_t region_token_bytes_ = 0;
  std::size_t slot_bytes_ = 0;
  std::int64_t max_depth_ = 0;

  // Declared so that destruction unmaps (slots_) before releasing pages
  // (pool_) before freeing the address range (range_).
  VirtualRange range_;
  mutable std::mutex map_mutex_;  // order: map_mutex_ before state_mutex_
  mutable std::mutex state_mutex_;
  PagePool pool_;
  std::vector<Slot> slots_;
  std::uint64_t release_counter_ = 0;
  std::int64_t in_flight_pages_ = 0;  // popped from the pool, not yet in a slot
  KvStats counters_;                  // cumulative fields only
  // Scratch for grow() (under map_mutex_), sized once: no allocation per step.
  std::vector<PageId> scratch_ids_;
  std::vector<PageHandle> scratch_handles_;
  std::vector<Victim> scratch_victims_;

  // prepare() -> mapper -> wait().
  mutable std::mutex queue_mutex_;
  std::condition_variable work_cv_;  // mapper waits for posted work
  std::condition_variable done_cv_;  // wait() waits for done_ticket_
  bool stop_ = false;
  bool mapper_ready_ = false;
  bool mapper_idle_ = false;                    // waiting for work, nothing in hand
  Status mapper_status_;                        // why the mapper could not start
  std::atomic<std::uint64_t> posted_{0};        // every post, lookahead-only included
  std::uint64_t done_ticket_ = 0;               // required work finished through here
  std::vector<std::int64_t> want_required_;     // [max_slots] target depth, 0 = none
  std::vector<std::int64_t> want_desired_;      // [max_slots]
  std::vector<std::uint64_t> want_generation_;  // [max_slots] owner the wants belong to
  std::vector<int> dirty_slots_;
  std::vector<std::uint8_t> is_dirty_;
  // expect_acquire() -> mapper (queue_mutex_). prewarm_tokens_ 0 = no hint.
  std::int64_t prewarm_expected_ = 0;
  std::int64_t prewarm_tokens_ = 0;
  std::uint64_t prewarm_seq_ = 0;  // bumped by every hint and cancel
  bool prewarm_busy_ = false;      // the mapper is mapping a chunk for a hint
  PrewarmStats prewarm_counters_;  // under state_mutex_
  // The outcome of each of the last kTicketHistory tickets (ticket t at
  // t % kTicketHistory), written by the mapper when its batch is done.
  struct TicketResult {
    std::uint64_t ticket = 0;
    Status status;
  };
  static constexpr std::uint64_t kTicketHistory = 1024;
  std::vector<TicketResult> results_;
  std::thread mapper_;
};

}  // namespace vpod::kvcache
