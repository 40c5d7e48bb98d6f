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
// Admission. KvCapacity's verbs keep the promises exact in depth steps (a
// page in each region): a promise covers the tokens plus lookahead_tokens
// (mapped into an active slot from free pages, so not reclaimable by others)
// and, with deferred reclamation, the depth an idle slot still holds when it
// is reused (can_allocate predicts the slot acquire() picks; allocate
// accounts the depth it got). Before admission reads free slots' depths, the
// pre-mapping is settled (settle_prewarm), so what can_allocate predicted is
// what allocate gets, and pre-mapped pages (at most the hinted request's)
// fit in that request's promise.
//
// Prefix caching (config.prefix_caching). A depth step (a page in every
// region) holds a whole token range of the slot: 2 MiB / (layers x kv_heads x
// head_dim x 2 bytes) tokens of every layer with the all-layers layout (32
// for Llama-3-8B), 2 MiB / (kv_heads x head_dim x 2 bytes) with per-layer
// (1024 for Llama-3-8B: coarser, fewer hits). Once the step computing a
// prompt's full depth step is queued (cache_prompt, applied in prepare()),
// the step's pages become an indexed block. A later request whose tokens
// start with indexed blocks gets a slot with those blocks' physical pages
// mapped at the start of its own virtual range (no copy; the slot that
// already maps most of them is preferred, so a conversation's next turn
// usually maps nothing), and its prefill starts after them: its K/V stays
// one contiguous tensor and no kernel changes. Admission counts a block
// that running requests share once (PromiseLedger's shared units). Details
// of lifetimes and eviction: slot_ledger.h.
//
// The parts: SlotLedger (slot_ledger.h: pages and slots, pure logic),
// KvMemory (kv_memory.h: the mappings and the driver calls around the
// ledger), KvMapper (kv_mapper.h: the mapper thread); this class is the
// facade that sizes them and implements KvStore.
//
// Thread-safety. Every slot-level method (acquire, release, ensure,
// prepare(targets), wait, capacity, stats, the hints) is safe from any
// thread, concurrently with each other and with the mapper thread (locks:
// kv_memory.h, kv_mapper.h). KvCapacity's verbs (the promises) are called
// by one thread at a time: the engine thread. Posted growth is tagged with
// the slot's owner (a generation bumped by acquire()), so growth a released
// slot's old owner asked for is dropped and never lands on the slot's next
// owner; a free slot's depth changes only by reclamation and by pre-mapping,
// and the latter stops at settle_prewarm() until the next expect_acquire().
// Memory of a slot is readable only up to backed_tokens(slot); the views are
// immutable for the cache's lifetime. Destroying the cache synchronizes with
// all GPU work first (readers of active slots have no fence).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "common/kv_view.h"
#include "kvcache/kv_store.h"
#include "kvcache/page_pool.h"
#include "kvcache/promise_ledger.h"
#include "kvcache/slot_ledger.h"
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
  // The stream the model's kernels read K/V on: KvCapacity::free() releases
  // slots with it as their last reader. Null: the legacy stream (all work on
  // the device).
  cudaStream_t reader_stream = nullptr;
  // Prefix caching (kv_capacity.h): computed prompt depth steps are indexed
  // and mapped into later requests that start with them. `prefix_salt` names
  // the model the K/V belong to (mixed with shape, dtype and layout).
  bool prefix_caching = false;
  std::uint64_t prefix_salt = 0;
};

class KvMemory;
class KvMapper;

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
  std::size_t page_bytes() const { return geometry_.page_bytes; }
  int num_regions() const { return geometry_.num_regions; }
  // Bytes of one token in one region, and of one slot in one region (padded).
  std::size_t region_token_bytes() const { return geometry_.region_token_bytes; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  // Pages per region needed to back `tokens`, and tokens `pages` back.
  std::int64_t pages_for_tokens(std::int64_t tokens) const {
    return geometry_.pages_for_tokens(tokens);
  }
  std::int64_t tokens_for_pages(std::int64_t pages) const {
    return geometry_.tokens_for_pages(pages);
  }
  // Pages mapped per region for this slot (its depth).
  std::int64_t slot_depth(int slot) const;

  // Layer `layer`'s K/V as strided tensors over all slots.
  KvLayerView layer_view(int layer) const;

  // KvCapacity (engine thread): promises in depth steps.
  bool can_allocate(int num_tokens, const PrefixQuery& prefix) const override;
  Allocation allocate(int num_tokens, const PrefixQuery& prefix) override;
  bool grow(int slot, int num_tokens) override;
  void free(int slot) override;
  // Maps the step's tokens (background: posts them and waits), asks the
  // mapper for each prompt's next chunk and, once those are posted, for the
  // next admission's first chunk (expect_admission's hint).
  Status prepare(const HybridBatch& batch) override;
  void expect_admission(int num_tokens, int first_chunk_tokens) override;
  void cache_prompt(int slot, std::span<const std::int32_t> prompt, int computed) override;
  // Whether prefix caching is on (asked for, and the shapes put whole
  // tokens in a page), and the tokens of one block.
  bool prefix_caching() const;
  int prefix_block_tokens() const;
  double usage() const override { return promises_.usage(); }

  // KvStore.
  int max_slots() const override { return config_.max_slots; }
  int max_ctx() const override { return config_.max_ctx; }
  KvCacheView view() const override { return {.contiguous = layer_views_, .paged = {}}; }
  std::int64_t used_units() const override { return promises_.used_units(); }
  std::int64_t total_units() const override { return promises_.total_units(); }
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
  using PrewarmStats = SlotLedger::PrewarmStats;
  PrewarmStats prewarm_stats() const;
  static constexpr std::int64_t kPrewarmChunkPages = 16;  // = KvMemory's

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
  KvCache(const KvCacheConfig& config, std::shared_ptr<VmmProvider> provider);
  Status init();
  Status check_slot(int slot) const;
  Status check_tokens(std::int64_t tokens) const;
  // Depth steps a promise of `tokens` takes (see PromiseLedger).
  std::int64_t promise_units(std::int64_t tokens) const;
  // The slot's own units of a promise of `tokens` on a slot planned by `plan`.
  std::int64_t private_units(std::int64_t tokens, const AcquirePlan& plan) const;
  // Blocks a request of `num_tokens` may share: never all its tokens.
  int max_shared_blocks(int num_tokens) const;
  // Blocks running requests hold (the promise ledger's shared units).
  std::int64_t pinned_blocks() const;

  const KvCacheConfig config_;
  std::shared_ptr<VmmProvider> provider_;
  PageGeometry geometry_;
  std::size_t slot_bytes_ = 0;
  std::vector<KvLayerView> layer_views_;  // [num_layers]
  // Declared so that the mapper thread stops before the memory goes.
  std::unique_ptr<KvMemory> memory_;
  std::unique_ptr<KvMapper> mapper_;  // background growth only
  // KvCapacity (engine thread).
  PromiseLedger promises_;
  std::vector<SlotTokens> targets_;  // prepare(batch) scratch, [max_slots]
  std::int64_t next_admission_tokens_ = 0;
  std::int64_t next_admission_chunk_ = 0;
  // Prefix caching (engine thread): each slot's shared leading steps, and
  // the prompts cache_prompt() reported this step, indexed in prepare().
  std::vector<std::int64_t> shared_steps_;  // [max_slots]
  struct PromptToIndex {
    int slot = 0;
    std::uint64_t generation = 0;  // the slot's owner when reported
    std::span<const std::int32_t> tokens;
  };
  std::vector<PromptToIndex> to_index_;  // reserved [max_slots]
  // Indexes one report's full prompt steps (under the map lock).
  void index_reported(SlotLedger& ledger, const PromptToIndex& p);
  int block_tokens_ = 0;  // 0: prefix caching off
};

}  // namespace vpod::kvcache
