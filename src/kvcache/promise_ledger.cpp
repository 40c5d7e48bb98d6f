// Admission's promise ledger, shared by the vAttention and the paged store.
#include "kvcache/promise_ledger.h"

#include <algorithm>

#include "common/check.h"

namespace vpod::kvcache {

PromiseLedger::PromiseLedger(int max_slots, std::int64_t total_units)
    : total_units_(total_units), slot_units_(max_slots, -1), slot_tokens_(max_slots, 0) {
  VPOD_CHECK(max_slots > 0 && total_units > 0);
}

double PromiseLedger::usage() const {
  return static_cast<double>(used_units_) / static_cast<double>(total_units_);
}

bool PromiseLedger::is_open(int slot) const {
  return slot >= 0 && slot < static_cast<int>(slot_units_.size()) && slot_units_[slot] >= 0;
}

std::int64_t PromiseLedger::promise_units(std::int64_t token_units,
                                          std::int64_t mapped_units) const {
  // Alone, a slot cannot be handed more than the whole cache.
  return std::max(token_units, std::min(mapped_units, total_units_));
}

void PromiseLedger::open(int slot, std::int64_t units, std::int64_t tokens) {
  VPOD_CHECK(slot >= 0 && slot < static_cast<int>(slot_units_.size()) && slot_units_[slot] < 0);
  slot_units_[slot] = units;
  slot_tokens_[slot] = tokens;
  used_units_ += units;
}

bool PromiseLedger::raise(int slot, std::int64_t units, std::int64_t tokens) {
  VPOD_CHECK(is_open(slot));
  const std::int64_t extra = units - slot_units_[slot];
  if (extra > 0) {
    if (used_units_ + extra > total_units_) return false;
    slot_units_[slot] += extra;
    used_units_ += extra;
  }
  slot_tokens_[slot] = std::max(slot_tokens_[slot], tokens);
  return true;
}

void PromiseLedger::close(int slot) {
  VPOD_CHECK(is_open(slot));
  used_units_ -= slot_units_[slot];
  slot_units_[slot] = -1;
  slot_tokens_[slot] = 0;
}

void PromiseLedger::lower(int slot, std::int64_t units) {
  VPOD_CHECK(is_open(slot) && units >= 0 && units <= slot_units_[slot]);
  slot_units_[slot] -= units;
  used_units_ -= units;
}

void PromiseLedger::set_shared(std::int64_t units) {
  VPOD_CHECK(units >= 0);
  used_units_ += units - shared_units_;
  shared_units_ = units;
}

void PromiseLedger::step_targets(const HybridBatch& batch, std::vector<SlotTokens>& out) const {
  out.clear();
  // A prompt that does not finish this step got less than it wanted because
  // the step's token budget ran out, so this step's tokens are the budget,
  // and its next chunk is at most that long (often that long: a request
  // admitted with the budget's leftovers gets a small first chunk, then a
  // full one). The store maps up to there in the background while this step
  // computes, never beyond the tokens promised to the slot at admission.
  std::int64_t step_tokens = 0;
  for (const BatchSequence& s : batch.prefills) step_tokens += s.num_new;
  for (const BatchSequence& s : batch.decodes) step_tokens += s.num_new;
  for (const BatchSequence& s : batch.prefills) {
    const std::int64_t next_chunk_end = std::min<std::int64_t>(
        slot_tokens_[s.slot], static_cast<std::int64_t>(s.context_len()) + step_tokens);
    out.push_back({s.slot, s.context_len(), next_chunk_end});
  }
  for (const BatchSequence& s : batch.decodes) out.push_back({s.slot, s.context_len()});
}

}  // namespace vpod::kvcache
