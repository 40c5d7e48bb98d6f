// The scheduler's view of a KV cache: slots and how many tokens each can
// hold. Admission and preemption are decided against it. Both KV stores
// implement it (kv_store.h); the engine's policy tests use a block-counting
// double. It lives here, not in engine/, so that kvcache depends on nothing
// above it (engine -> kvcache -> common).
//
// Reservations (promises) are in tokens; the store rounds them to its own
// unit (a depth step of pages for vAttention, a block for the paged cache).
// A promise means the tokens can be backed: when the physical mapping
// happens (now, or in prepare()) is the store's business.
// Paired verbs, as in nano-vllm's BlockManager: can_allocate/allocate, grow,
// free.
//
// Prefix caching. A store may keep the K/V of computed prompt blocks after
// their request ends and hand them to a later request whose tokens start
// with the same blocks (same salt): admission then reports how many leading
// tokens are already in the new slot (Allocation::cached_tokens), and the
// request's prefill starts there. Stores index blocks as the scheduler
// reports them computed (cache_prompt). A store without prefix caching
// reports 0 cached tokens.
#pragma once

#include <cstdint>
#include <span>

#include "common/hybrid_batch.h"
#include "common/status.h"

namespace vpod::kvcache {

// What admission may look up: the request's known tokens (the prompt, or the
// prompt and its outputs after a preemption) and its cache salt (requests
// with different salts never share; 0 is the default tenant). An empty span
// looks nothing up.
struct PrefixQuery {
  std::span<const std::int32_t> tokens;
  std::uint64_t salt = 0;
};

struct Allocation {
  int slot = -1;
  // Leading tokens whose K/V the slot already holds: a whole number of the
  // store's blocks, always fewer than the request's tokens (the last token
  // is computed for the logits). 0 without a hit.
  int cached_tokens = 0;
};

class KvCapacity {
 public:
  virtual ~KvCapacity() = default;

  // Tokens one slot can ever hold (the cache's max context).
  virtual int max_tokens_per_slot() const = 0;
  // Tokens the whole cache can back at once (the admission ceiling).
  virtual std::int64_t capacity_tokens() const = 0;

  // Whether a free slot exists and `num_tokens` tokens can be promised, the
  // cached blocks of `prefix` (a hit) counted as the store counts them
  // (a block other running requests already hold costs nothing).
  virtual bool can_allocate(int num_tokens, const PrefixQuery& prefix) const = 0;
  // Takes a slot with `num_tokens` tokens promised and the cached blocks of
  // `prefix` in place. Precondition: can_allocate with the same arguments,
  // and nothing else called on the store in between.
  virtual Allocation allocate(int num_tokens, const PrefixQuery& prefix) = 0;
  // Promises up to `num_tokens` tokens in total for `slot`. Returns false, and
  // changes nothing, when the cache cannot back them.
  virtual bool grow(int slot, int num_tokens) = 0;
  // Returns the slot and its promise. Memory the slot's last reader may still
  // read is not reused before that work completes (the store's reader stream).
  virtual void free(int slot) = 0;

  // Called once per step after scheduling, before the forward: makes the
  // step's tokens resident (and, for the paged cache on CUDA, its block
  // tables on the device), and starts later growth in the background: the
  // next prefill chunk of each prompt and the next admission's first chunk.
  virtual Status prepare(const HybridBatch& batch) = 0;

  // The scheduler reports, each step, how far `slot`'s prompt is computed
  // once the step's kernels (queued in order) have run: `prompt` is the
  // request's prompt tokens, `computed` how many of them the step leaves in
  // the cache. A store with prefix caching indexes the full blocks among
  // them (later steps' readers run after the writes, in stream order).
  // Default: no prefix caching.
  virtual void cache_prompt(int slot, std::span<const std::int32_t> prompt, int computed) {
    (void)slot;
    (void)prompt;
    (void)computed;
  }

  // A hint, given after each schedule(): the next admission will likely be a
  // request of `num_tokens` tokens whose first prefill chunk has up to
  // `first_chunk_tokens` (0: nobody waits). A cache may prepare for it while
  // the step runs (vAttention maps a free slot's first pages from free memory
  // in the background); it changes no promise. Default: ignored.
  virtual void expect_admission(int num_tokens, int first_chunk_tokens) {
    (void)num_tokens;
    (void)first_chunk_tokens;
  }

  // Fraction of the KV memory promised, in [0, 1] (the usage gauge).
  virtual double usage() const = 0;
};

}  // namespace vpod::kvcache
