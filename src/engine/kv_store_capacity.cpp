#include "engine/kv_store_capacity.h"

#include <algorithm>

#include "common/check.h"

namespace vpod::engine {

KvGeometry vattn_geometry(kvcache::KvCache& cache) {
  KvGeometry g;
  // One unit = one depth step: a page in each of the cache's regions.
  g.total_units = cache.stats().pages_total / cache.num_regions();
  g.lookahead_tokens = cache.config().lookahead_tokens;
  g.units_for_tokens = [&cache](std::int64_t tokens) { return cache.pages_for_tokens(tokens); };
  if (cache.config().reclaim == kvcache::ReclaimPolicy::deferred)
    g.held_units = [&cache](int slot) { return cache.slot_depth(slot); };
  if (cache.config().growth == kvcache::GrowthMode::background) {
    g.before_acquire = [&cache] { cache.settle_prewarm(); };
    g.expect_acquire = [&cache](std::int64_t expected, std::int64_t first) {
      cache.expect_acquire(expected, first);
    };
  }
  return g;
}

KvGeometry paged_geometry(const kvcache::PagedKvCache& cache) {
  KvGeometry g;
  g.total_units = cache.num_blocks();
  const std::int64_t block = cache.config().block_size;
  g.units_for_tokens = [block](std::int64_t tokens) { return (tokens + block - 1) / block; };
  return g;
}

KvStoreCapacity::KvStoreCapacity(kvcache::KvStore& store, KvGeometry geometry,
                                 cudaStream_t last_reader)
    : store_(store),
      geometry_(std::move(geometry)),
      last_reader_(last_reader),
      slot_units_(store.max_slots(), -1),
      slot_tokens_(store.max_slots(), 0) {
  VPOD_CHECK(geometry_.total_units > 0 && geometry_.units_for_tokens);
  targets_.reserve(store.max_slots());
}

std::int64_t KvStoreCapacity::promise_units(std::int64_t tokens) const {
  // The tokens themselves, plus what the mapper maps ahead of them - capped
  // at the whole cache: alone, a slot cannot be handed more than that.
  const std::int64_t mapped =
      std::min<std::int64_t>(store_.max_ctx(), tokens + geometry_.lookahead_tokens);
  return std::max(geometry_.units_for_tokens(tokens),
                  std::min(geometry_.units_for_tokens(mapped), geometry_.total_units));
}

bool KvStoreCapacity::can_allocate(int num_tokens) const {
  if (num_tokens > store_.max_ctx() || store_.num_free_slots() == 0) return false;
  if (geometry_.before_acquire) geometry_.before_acquire();  // held depths stay put
  std::int64_t need = promise_units(num_tokens);
  if (geometry_.held_units) {
    // acquire() picks the free slot whose held depth best fits: the smallest
    // one that covers the request, if any (else one holding less than the
    // request needs, which the promise covers anyway). allocate() accounts
    // the depth it actually gets.
    const std::int64_t request_units = geometry_.units_for_tokens(num_tokens);
    std::int64_t best_fit = -1;
    for (int s = 0; s < static_cast<int>(slot_units_.size()); ++s) {
      if (slot_units_[s] >= 0) continue;
      const std::int64_t held = geometry_.held_units(s);
      if (held >= request_units && (best_fit < 0 || held < best_fit)) best_fit = held;
    }
    need = std::max(need, best_fit);
  }
  return used_units_ + need <= geometry_.total_units;
}

int KvStoreCapacity::allocate(int num_tokens) {
  if (geometry_.before_acquire) geometry_.before_acquire();
  Result<int> slot = store_.acquire(num_tokens);
  VPOD_CHECK_MSG(slot.ok(), "KV acquire after can_allocate: " + slot.status().to_string());
  VPOD_CHECK(slot_units_[*slot] < 0);
  std::int64_t units = promise_units(num_tokens);
  if (geometry_.held_units) units = std::max(units, geometry_.held_units(*slot));
  slot_units_[*slot] = units;
  slot_tokens_[*slot] = num_tokens;
  used_units_ += units;
  return *slot;
}

bool KvStoreCapacity::grow(int slot, int num_tokens) {
  VPOD_CHECK(slot >= 0 && slot < static_cast<int>(slot_units_.size()) && slot_units_[slot] >= 0);
  if (num_tokens > store_.max_ctx()) return false;
  const std::int64_t extra = promise_units(num_tokens) - slot_units_[slot];
  if (extra > 0) {
    if (used_units_ + extra > geometry_.total_units) return false;
    slot_units_[slot] += extra;
    used_units_ += extra;
  }
  slot_tokens_[slot] = std::max<std::int64_t>(slot_tokens_[slot], num_tokens);
  return true;
}

void KvStoreCapacity::free(int slot) {
  VPOD_CHECK(slot >= 0 && slot < static_cast<int>(slot_units_.size()) && slot_units_[slot] >= 0);
  const Status status = store_.release(slot, last_reader_);
  VPOD_CHECK_MSG(status.ok(), "KV release: " + status.to_string());
  used_units_ -= slot_units_[slot];
  slot_units_[slot] = -1;
  slot_tokens_[slot] = 0;
}

Status KvStoreCapacity::prepare(const HybridBatch& batch) {
  targets_.clear();
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
    targets_.push_back({s.slot, s.context_len(), next_chunk_end});
  }
  for (const BatchSequence& s : batch.decodes) targets_.push_back({s.slot, s.context_len()});
  VPOD_ASSIGN_OR_RETURN(kvcache::PrepareTicket ticket, store_.prepare(targets_));
  // After the step's own growth is posted (the mapper does that first): the
  // next admission's first chunk, mapped while this step runs.
  if (geometry_.expect_acquire) {
    geometry_.expect_acquire(next_admission_tokens_, next_admission_chunk_);
  }
  return store_.wait(ticket);
}

void KvStoreCapacity::expect_admission(int num_tokens, int first_chunk_tokens) {
  next_admission_tokens_ = std::clamp(num_tokens, 0, store_.max_ctx());
  next_admission_chunk_ = std::clamp<std::int64_t>(first_chunk_tokens, 0, next_admission_tokens_);
}

double KvStoreCapacity::usage() const {
  return static_cast<double>(used_units_) / static_cast<double>(geometry_.total_units);
}

}  // namespace vpod::engine
