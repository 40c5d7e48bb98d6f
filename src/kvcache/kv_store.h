// What the engine sees of a KV cache, whichever kind backs it: admission
// (KvCapacity's promises), slots (one per running request), growth before
// each step, the views the model reads K/V through, and statistics for
// metrics. Two implementations:
//   - KvCache (kv_cache.h): vAttention, virtually contiguous per slot and
//     demand-paged with the VMM API (`--kv-cache vattn`, the default);
//   - PagedKvCache (paged_kv_cache.h): vLLM-style block tables over one
//     preallocated buffer (`--kv-cache paged`, the papers' baseline).
// Running out of memory is a resource_exhausted Status; nothing here throws
// or exits across this boundary.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/dtype.h"
#include "common/kv_view.h"
#include "common/status.h"
#include "kvcache/kv_capacity.h"

namespace vpod::kvcache {

// The model dimensions a KV cache stores.
struct KvShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::f16;

  // K and V of one token across all layers: 2 * layers * heads * dim * size.
  std::size_t bytes_per_token() const {
    return 2 * static_cast<std::size_t>(num_layers) * num_kv_heads * head_dim * dtype_size(dtype);
  }
  Status validate() const;
};

// One slot's token count for the next step.
struct SlotTokens {
  int slot = 0;
  std::int64_t tokens = 0;  // the step needs the slot's first `tokens` tokens backed
  // Tokens a later step of this slot is known to need (a prompt's next prefill
  // chunk), mapped in the background like lookahead: best effort, never
  // waited for. 0: only the store's own lookahead.
  std::int64_t ahead = 0;
};

// Names one prepare() for wait(). 0 means "nothing to wait for".
using PrepareTicket = std::uint64_t;

// A snapshot for metrics. "Pages" are physical pages for vAttention and
// blocks for the paged baseline; page_bytes says how big one is (all layers'
// K and V for a block; one region's page for vAttention).
struct KvStats {
  std::size_t page_bytes = 0;
  std::int64_t pages_total = 0;
  std::int64_t pages_free = 0;    // in the pool, unmapped
  std::int64_t pages_mapped = 0;  // backing some slot (active or idle)
  std::int64_t pages_idle = 0;    // of those, backing released slots (reusable)
  int active_slots = 0;
  int free_slots = 0;
  // Over active slots: tokens their pages can hold vs tokens requested.
  std::int64_t tokens_backed = 0;
  std::int64_t tokens_used = 0;
  // Bytes of active slots' pages vs bytes their tokens occupy;
  // internal_fragmentation = 1 - bytes_used / bytes_backed (0 when empty).
  std::int64_t bytes_backed = 0;
  std::int64_t bytes_used = 0;
  double internal_fragmentation = 0.0;
  // Driver/OS work since creation (vAttention only).
  std::int64_t map_calls = 0;
  std::int64_t pages_mapped_total = 0;
  double map_seconds = 0.0;
  std::int64_t unmap_calls = 0;
  std::int64_t pages_unmapped_total = 0;
  double unmap_seconds = 0.0;
  std::int64_t pages_reclaimed = 0;  // taken from idle slots' tails
  // Background growth (vAttention, background mode).
  std::int64_t mapper_pages = 0;     // pages mapped by the mapper thread
  double mapper_busy_seconds = 0.0;  // time it spent growing slots
  std::int64_t wait_calls = 0;
  double wait_seconds = 0.0;  // step thread blocked in wait()
  // Prefix caching (paged store): indexed blocks, those of them no slot
  // holds (cached, evictable, counted in pages_free), and evictions so far.
  std::int64_t prefix_blocks_cached = 0;
  std::int64_t prefix_blocks_unreferenced = 0;
  std::int64_t prefix_evictions = 0;
};

// Two levels of verbs on one object. The scheduler uses KvCapacity's
// (can_allocate/allocate, grow, free, prepare(batch), expect_admission):
// promises kept exact in the store's own unit, mapped through the slot verbs
// below, and released on the store's reader stream. Benchmarks and tests may
// drive the slot verbs directly (acquire, ensure, prepare(targets), wait,
// release); a slot acquired that way holds no promise, so do not mix the
// two levels on one store.
class KvStore : public KvCapacity {
 public:
  using KvCapacity::prepare;

  virtual int max_slots() const = 0;
  virtual int max_ctx() const = 0;
  int max_tokens_per_slot() const final { return max_ctx(); }

  // Every layer's K/V as the model reads them: contiguous views for
  // vAttention, block pools and tables for the paged cache. Valid, unchanged,
  // for the store's life.
  virtual KvCacheView view() const = 0;
  // The promise ledger in the store's unit (for tests and the usage gauge).
  virtual std::int64_t used_units() const = 0;
  virtual std::int64_t total_units() const = 0;

  // A free slot for a request expected to reach `expected_tokens`, or
  // resource_exhausted when every slot is taken. Maps nothing.
  virtual Result<int> acquire(std::int64_t expected_tokens) = 0;
  // Ends the slot's request. `last_reader` is the stream of the last kernels
  // that may read the slot's K/V (null: any work on the device); memory they
  // may read is never unmapped before that work completes.
  virtual Status release(int slot, cudaStream_t last_reader) = 0;
  // Backs the slot's first `tokens` tokens before returning.
  virtual Status ensure(int slot, std::int64_t tokens) = 0;
  // Hands the growth the next step needs to the background (where there is
  // one). wait(ticket) returns once those tokens are backed, or the Status of
  // why they cannot be; call it before launching the step's kernels.
  virtual Result<PrepareTicket> prepare(std::span<const SlotTokens> next) = 0;
  virtual Status wait(PrepareTicket ticket) = 0;

  // Admission. Tokens the whole store can hold; tokens one slot can grow to
  // right now; tokens all unused memory could back for new growth. Each is a
  // consistent snapshot; while growth or reclamation is in flight (pages
  // between the pool and a slot) it may be momentarily low, never high.
  std::int64_t capacity_tokens() const override = 0;
  virtual std::int64_t capacity_tokens(int slot) const = 0;
  virtual std::int64_t free_tokens() const = 0;
  // Tokens of this slot already backed (readable and writable now).
  virtual std::int64_t backed_tokens(int slot) const = 0;
  virtual int num_free_slots() const = 0;

  virtual KvStats stats() const = 0;
};

// "96GiB", "512MiB", "1.5GB", "4096": bytes (binary suffixes are powers of
// 1024, decimal ones powers of 1000). For --kv-cache-memory.
Result<std::size_t> parse_memory_size(std::string_view text);

}  // namespace vpod::kvcache
