// What admission promised each slot, in the store's own unit (a depth step of
// pages for vAttention, a block for the paged cache), so that a promised
// token can always be backed when prepare() maps it. Pure bookkeeping; the
// store that owns it computes the units and guards it with its own lock.
//
// A promise for `tokens` covers the tokens themselves plus what the store
// maps ahead of them (vAttention's lookahead: mapped from free pages into an
// active slot, so not reclaimable by others), capped at the whole cache.
//
// With prefix caching, units shared by several slots (blocks that running
// requests hold) are counted once, as `shared` units beside the slots' own:
// used = sum of slots' private units + shared units <= total.
#pragma once

#include <cstdint>
#include <vector>

#include "common/hybrid_batch.h"
#include "kvcache/kv_store.h"

namespace vpod::kvcache {

class PromiseLedger {
 public:
  PromiseLedger() = default;
  PromiseLedger(int max_slots, std::int64_t total_units);

  std::int64_t total_units() const { return total_units_; }
  std::int64_t used_units() const { return used_units_; }
  double usage() const;
  bool is_open(int slot) const;
  // Tokens the slot's promise was made for (0 when not open).
  std::int64_t tokens(int slot) const { return slot_tokens_[slot]; }

  // Units a promise takes: `token_units` back the tokens, `mapped_units`
  // back what the store maps for them (tokens + lookahead, within max_ctx).
  std::int64_t promise_units(std::int64_t token_units, std::int64_t mapped_units) const;
  bool fits(std::int64_t units) const { return used_units_ + units <= total_units_; }
  // Opens a promise of `units` for `tokens` on a slot that has none.
  void open(int slot, std::int64_t units, std::int64_t tokens);
  // Raises the slot's promise to `units` for `tokens`; false, and nothing
  // changes, if the extra units do not fit.
  bool raise(int slot, std::int64_t units, std::int64_t tokens);
  void close(int slot);
  // A slot's own units turned shared (its blocks were indexed): its promise
  // shrinks by `units`; the caller counts them in set_shared().
  void lower(int slot, std::int64_t units);
  // Units held once on behalf of every slot sharing them.
  void set_shared(std::int64_t units);
  std::int64_t shared_units() const { return shared_units_; }

  // This step's targets for KvStore::prepare: each sequence's context, and
  // for a prefill chunk the end of the prompt's next chunk (`ahead`), never
  // past the tokens promised to its slot. Fills `out` (reserved by the
  // caller: allocates nothing once it holds max_slots entries).
  void step_targets(const HybridBatch& batch, std::vector<SlotTokens>& out) const;

 private:
  std::int64_t total_units_ = 0;
  std::int64_t used_units_ = 0;  // slots' units + shared_units_
  std::int64_t shared_units_ = 0;
  std::vector<std::int64_t> slot_units_;   // [max_slots] promised units; -1 = none
  std::vector<std::int64_t> slot_tokens_;  // [max_slots] tokens the promise was made for
};

}  // namespace vpod::kvcache
