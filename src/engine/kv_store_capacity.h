// KvCapacity over the real KV caches (src/kvcache): the vAttention KvCache and
// the paged baseline, both kvcache::KvStore.
//
// The scheduler promises tokens (admission reserves a request's prefill, each
// decode grows it by one); this adapter keeps those promises exact in the
// store's own unit - a depth step of pages per region for vAttention, a block
// for the paged cache - so that a promised token can always be backed when
// prepare() maps it (and a prefill chunk's prepare() asks the store to map the
// prompt's next chunk in the background, within the promise, so a long prompt's
// mapping stays off the critical path after its first chunk):
//   - a slot's promise covers its tokens plus the store's lookahead (the
//     background mapper maps that far ahead from free pages, and pages mapped
//     into an active slot cannot be reclaimed by others);
//   - with deferred reclamation, acquire() may hand the new request an idle
//     slot that still holds more pages than it needs (best fit by depth);
//     those pages count against the promise budget too: admission predicts
//     the slot acquire() will pick, and allocate() accounts the depth it got;
//   - the scheduler's hint about the next admission (expect_admission) goes
//     to the store with each prepare(): the background vAttention cache maps
//     the free slot acquire() will pick to the first chunk's depth while the
//     step runs (eager allocation), from free pages only. Those pages belong
//     to a free slot - held and reclaimable like deferred-reclamation pages,
//     no promise - and never exceed the hinted request's tokens, so they fit
//     in its promise when it gets the slot. Before admission reads free slots'
//     depths (can_allocate, allocate) the pre-mapping is stopped
//     (before_acquire), so what can_allocate predicted is what allocate gets.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/kv_capacity.h"
#include "kvcache/kv_cache.h"
#include "kvcache/kv_store.h"
#include "kvcache/paged_kv_cache.h"

namespace vpod::engine {

// How a store counts memory, in its own allocation unit.
struct KvGeometry {
  std::int64_t total_units = 0;       // units the store can back at once
  std::int64_t lookahead_tokens = 0;  // mapped beyond each prepare() target
  // Units that back `tokens` tokens of one slot.
  std::function<std::int64_t(std::int64_t tokens)> units_for_tokens;
  // Units a free slot still holds (deferred reclamation), which acquire()
  // may hand to the next request. Null: none (the paged cache frees at once).
  std::function<std::int64_t(int slot)> held_units;
  // Called before admission reads held_units (can_allocate) and before
  // acquire(). For the background vAttention cache it stops pre-mapping free
  // slots (KvCache::settle_prewarm, waits at most one chunk), so the free
  // slots' held depths stay put until the next prepare(). Growth in flight
  // for a slot as it is released never lands (the cache unmaps it again).
  std::function<void()> before_acquire;
  // The next admission's hint (expected tokens, first chunk's tokens), passed
  // on by prepare() once the step's own growth is posted. Null: ignored.
  std::function<void(std::int64_t, std::int64_t)> expect_acquire;
};

KvGeometry vattn_geometry(kvcache::KvCache& cache);
KvGeometry paged_geometry(const kvcache::PagedKvCache& cache);

class KvStoreCapacity final : public KvCapacity {
 public:
  // `last_reader`: the stream the model's kernels run on (released slots'
  // pages are not reused before its work completes); null for the CPU.
  KvStoreCapacity(kvcache::KvStore& store, KvGeometry geometry, cudaStream_t last_reader);

  int max_tokens_per_slot() const override { return store_.max_ctx(); }
  std::int64_t capacity_tokens() const override { return store_.capacity_tokens(); }
  bool can_allocate(int num_tokens) const override;
  int allocate(int num_tokens) override;
  bool grow(int slot, int num_tokens) override;
  void free(int slot) override;
  Status prepare(const HybridBatch& batch) override;
  void expect_admission(int num_tokens, int first_chunk_tokens) override;
  double usage() const override;

  std::int64_t used_units() const { return used_units_; }
  std::int64_t total_units() const { return geometry_.total_units; }

 private:
  std::int64_t promise_units(std::int64_t tokens) const;

  kvcache::KvStore& store_;
  KvGeometry geometry_;
  cudaStream_t last_reader_;
  std::vector<std::int64_t> slot_units_;   // [max_slots] promised units; -1 = not ours
  std::vector<std::int64_t> slot_tokens_;  // [max_slots] tokens the promise was made for
  std::int64_t used_units_ = 0;
  std::vector<kvcache::SlotTokens> targets_;  // prepare() scratch, [max_slots]
  std::int64_t next_admission_tokens_ = 0;    // expect_admission(), for prepare()
  std::int64_t next_admission_chunk_ = 0;
};

}  // namespace vpod::engine
