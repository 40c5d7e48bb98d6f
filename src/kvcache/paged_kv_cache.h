// The paged baseline (`--kv-cache paged`): vLLM's PagedAttention memory
// manager. One buffer is allocated up front (device memory on CUDA, host
// memory on the CPU), laid out per layer as K and V block pools
// `[num_blocks, block_size, kv_heads, head_dim]`; a sequence's tokens live in
// fixed-size blocks listed in its block table. Blocks are handed out
// last-in-first-out and freed the moment a slot is released: a freed block is
// only rewritten by kernels queued later on the same stream, so no fence is
// needed. Growth is pure bookkeeping (no driver calls), so prepare() finishes
// synchronously and its ticket is always 0.
//
// Admission (KvCapacity) promises blocks: a promise of n tokens is
// ceil(n / block_size) blocks, and without prefix caching nothing is held
// past a release, so a promise never counts more than its own tokens.
//
// Prefix caching (config.prefix_caching), vLLM's design over the store's own
// blocks. cache_prompt() indexes a slot's full computed prompt blocks in a
// PrefixIndex (chain hash from the root of the slot's cache salt); a block
// whose content someone else already indexed stays private (no copy). A
// later allocate() whose tokens start with indexed blocks lists them at the
// head of its table (one more holder each) and reports them as
// cached_tokens, never all of the request's tokens: at most
// floor((tokens - 1) / block_size) blocks, so the last token is computed and
// no slot ever writes into an indexed block. free() drops holders tail
// first; an indexed block nobody holds stays cached in the index's LRU list
// and is evicted (forgotten, then handed out) only when the free list is
// empty, oldest first, so a request's later blocks go before its earlier.
// Every block is in exactly one place: the free list, one slot's table
// (private), or the index (listed by as many tables as it has holders).
//
// Promises with prefix caching count a shared block once:
//   used = sum over slots of private(s) + referenced
//   private(s) = ceil(promised_tokens(s) / block_size) - indexed(s)
//   referenced = indexed blocks with at least one holder
// where indexed(s) counts the indexed blocks in s's table. Indexing one of a
// slot's own blocks moves it from private(s) to referenced; a hit on a block
// another running slot holds costs nothing, on an unreferenced cached block
// one block. Invariant: used <= num_blocks, and each slot holds at most
// private(s) private blocks; since num_blocks = free + unreferenced +
// private blocks held + referenced, every promised block not yet held can
// be taken from the free list or by evicting an unreferenced one.
//
// Thread-safety: every slot-level method is safe from any thread (one
// mutex); KvCapacity's verbs are called by one thread at a time (the engine
// thread). Views hold pointers into the block tables: on the CPU, do not grow
// a slot while a kernel reads them; on CUDA, prepare(batch) copies the tables
// to the device after growth (on the legacy stream, and waits for the copy);
// callers of the slot-level prepare(targets) call sync_block_tables(stream)
// before the kernels that read the tables.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/kv_view.h"
#include "cuda/device_buffer.h"
#include "kvcache/kv_store.h"
#include "kvcache/prefix_index.h"
#include "kvcache/promise_ledger.h"

namespace vpod::kvcache {

struct PagedKvCacheConfig {
  KvShape shape;
  int block_size = 16;  // tokens per block, a power of two
  int max_slots = 0;
  int max_ctx = 0;
  // floor(memory / block_bytes) blocks, capped at max_slots full slots.
  std::size_t memory_bytes = 0;
  Device device = Device::cpu;
  int cuda_device = 0;
  // Prefix caching (kv_capacity.h) over whole blocks; `prefix_salt` names the
  // model the K/V belong to (mixed with shape and dtype).
  bool prefix_caching = false;
  std::uint64_t prefix_salt = 0;
};

class PagedKvCache final : public KvStore {
 public:
  static Result<std::unique_ptr<PagedKvCache>> create(const PagedKvCacheConfig& config);
  ~PagedKvCache() override;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  const PagedKvCacheConfig& config() const { return config_; }
  int num_blocks() const { return num_blocks_; }
  int max_blocks_per_slot() const { return max_blocks_per_slot_; }
  // K and V of all layers for one block.
  std::size_t block_bytes() const { return config_.block_size * config_.shape.bytes_per_token(); }

  // Layer `layer`'s pools and the block tables (device copy on CUDA).
  PagedKvView layer_view(int layer) const;
  // The slot's allocated blocks, in token order (host copy).
  std::vector<std::int32_t> block_table(int slot) const;
  // CUDA: copies the host block tables to the device copy on `stream` if they
  // changed since the last call. CPU: nothing to do.
  Status sync_block_tables(cudaStream_t stream);

  // KvCapacity (engine thread): promises in blocks.
  bool can_allocate(int num_tokens, const PrefixQuery& prefix) const override;
  Allocation allocate(int num_tokens, const PrefixQuery& prefix) override;
  bool grow(int slot, int num_tokens) override;
  void free(int slot) override;
  // Allocates the step's blocks and, on CUDA, uploads the block tables.
  Status prepare(const HybridBatch& batch) override;
  // Indexes the slot's full prompt blocks below `computed` that its table
  // already holds (call it after the step's prepare(batch)).
  // Indexes the full computed prompt blocks the slot's table holds now, and
  // once more after the next prepare(batch) has allocated the step's blocks.
  void cache_prompt(int slot, std::span<const std::int32_t> prompt, int computed) override;
  double usage() const override;

  // KvStore.
  int max_slots() const override { return config_.max_slots; }
  int max_ctx() const override { return config_.max_ctx; }
  KvCacheView view() const override { return {.contiguous = {}, .paged = layer_views_}; }
  std::int64_t used_units() const override;
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

  // Each block in exactly one place (the free list, one slot's table, or the
  // index with refcount = tables listing it), the promise ledger as above,
  // and the index's own invariants. For tests.
  Status check_invariants() const;

 private:
  explicit PagedKvCache(const PagedKvCacheConfig& config) : config_(config) {}
  Status init();
  Status check_slot(int slot) const;
  Result<int> acquire_locked(std::int64_t expected_tokens);
  Status ensure_locked(int slot, std::int64_t tokens);
  std::int64_t blocks_for_tokens(std::int64_t tokens) const {
    return (tokens + config_.block_size - 1) / config_.block_size;
  }
  // Blocks that can be handed out now: the free list and unreferenced cached.
  std::int64_t available_blocks_locked() const;
  // A block for a table: the free list's top, else the least recently used
  // unreferenced cached block (evicted). Precondition: one is available.
  std::int32_t take_block_locked();
  // The leading indexed blocks `prefix` may reuse for a request of
  // `num_tokens` tokens, into match_scratch_; returns how many.
  int match_locked(int num_tokens, const PrefixQuery& prefix) const;
  // The ledger units of slot s: its promised blocks less its indexed ones.
  std::int64_t private_units_locked(int slot, std::int64_t promised_tokens) const;
  // Re-states an open slot's ledger entry after its indexed count changed.
  void sync_promise_locked(int slot);
  void index_prompt_locked(int slot, std::span<const std::int32_t> prompt, int computed);

  const PagedKvCacheConfig config_;
  int num_blocks_ = 0;
  int max_blocks_per_slot_ = 0;
  std::byte* pool_ = nullptr;  // [layers][2][num_blocks][block_size][heads][dim]
  void* host_allocation_ = nullptr;
  cuda::DeviceBuffer device_pool_;
  cuda::DeviceBuffer device_tables_;

  mutable std::mutex mutex_;
  std::vector<std::int32_t> tables_;       // [max_slots][max_blocks_per_slot]
  std::vector<std::int32_t> slot_blocks_;  // [max_slots] blocks allocated
  std::vector<std::int64_t> used_tokens_;  // [max_slots]
  std::vector<std::uint8_t> active_;       // [max_slots]
  std::vector<std::int32_t> free_blocks_;  // LIFO
  bool tables_dirty_ = true;
  std::vector<PagedKvView> layer_views_;  // [num_layers]

  // Prefix caching (empty when off). An index entry and its block name each
  // other; a block not indexed has entry kNone.
  PrefixIndex index_;
  std::vector<PrefixIndex::BlockId> entry_of_block_;  // [num_blocks]
  std::vector<std::int32_t> block_of_entry_;          // [num_blocks] (index capacity)
  std::vector<std::int32_t> slot_indexed_;            // [max_slots] indexed blocks in the table
  std::vector<std::int32_t> slot_hashed_;             // [max_slots] leading blocks cache_prompt saw
  std::vector<std::uint64_t> slot_parent_;            // [max_slots] chain hash after them
  std::int64_t referenced_ = 0;                       // indexed blocks with a holder
  std::int64_t evictions_ = 0;
  mutable std::vector<PrefixIndex::BlockId> match_scratch_;  // [max_blocks_per_slot]

  // KvCapacity (engine thread).
  PromiseLedger promises_;
  std::vector<SlotTokens> targets_;  // prepare(batch) scratch, [max_slots]
  // cache_prompt() calls made before their step's blocks were allocated
  // (the scheduler reports at schedule time), indexed again in prepare().
  struct PromptToIndex {
    int slot = 0;
    std::uint64_t generation = 0;  // the slot's owner then
    std::span<const std::int32_t> prompt;
    int computed = 0;
  };
  std::vector<std::uint64_t> generation_;  // [max_slots] bumped by acquire()
  std::vector<PromptToIndex> to_index_;    // reserved [max_slots]
};

}  // namespace vpod::kvcache
