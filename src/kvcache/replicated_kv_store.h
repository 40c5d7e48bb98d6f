// The KV stores of a tensor-parallel group as one store: one store per rank
// (on CUDA one vAttention cache per GPU, holding that rank's KV heads), all of
// the same shape and budget. The scheduler admits against this one object;
// every verb that changes state is applied to every rank's store in the same
// order, so their ledgers (promises, slots, prefix index) make the same
// decisions and stay identical, and one admission decision holds for all.
// Queries answer from rank 0's store; admission asks every store (a store's
// answer may be momentarily low while its mapper works, never high).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "kvcache/kv_store.h"

namespace vpod::kvcache {

class ReplicatedKvStore final : public KvStore {
 public:
  // `stores`: one per rank, rank order, identical configurations (checked:
  // slots, context and capacity).
  static Result<std::unique_ptr<ReplicatedKvStore>> create(
      std::vector<std::unique_ptr<KvStore>> stores);

  int num_ranks() const { return static_cast<int>(stores_.size()); }
  // Rank r's store's view (its KV heads), for rank r's model.
  KvCacheView rank_view(int rank) const { return stores_.at(rank)->view(); }

  // ---- KvCapacity: every store, in rank order ----
  std::int64_t capacity_tokens() const override { return stores_[0]->capacity_tokens(); }
  bool can_allocate(int num_tokens, const PrefixQuery& prefix) const override;
  Allocation allocate(int num_tokens, const PrefixQuery& prefix) override;
  bool grow(int slot, int num_tokens) override;
  void free(int slot) override;
  Status prepare(const HybridBatch& batch) override;
  void cache_prompt(int slot, std::span<const std::int32_t> prompt, int computed) override;
  void expect_admission(int num_tokens, int first_chunk_tokens) override;
  double usage() const override { return stores_[0]->usage(); }

  // ---- KvStore ----
  int max_slots() const override { return stores_[0]->max_slots(); }
  int max_ctx() const override { return stores_[0]->max_ctx(); }
  KvCacheView view() const override { return stores_[0]->view(); }
  std::int64_t used_units() const override { return stores_[0]->used_units(); }
  std::int64_t total_units() const override { return stores_[0]->total_units(); }
  Result<int> acquire(std::int64_t expected_tokens) override;
  // Rank 0's store waits for `last_reader`; the others for all work on
  // their device (the stream is rank 0's).
  Status release(int slot, cudaStream_t last_reader) override;
  Status ensure(int slot, std::int64_t tokens) override;
  Result<PrepareTicket> prepare(std::span<const SlotTokens> next) override;
  Status wait(PrepareTicket ticket) override;
  std::int64_t capacity_tokens(int slot) const override;
  std::int64_t free_tokens() const override;
  std::int64_t backed_tokens(int slot) const override;
  int num_free_slots() const override { return stores_[0]->num_free_slots(); }
  KvStats stats() const override { return stores_[0]->stats(); }

 private:
  explicit ReplicatedKvStore(std::vector<std::unique_ptr<KvStore>> stores);

  std::vector<std::unique_ptr<KvStore>> stores_;
  PrepareTicket next_ticket_ = 1;
  std::map<PrepareTicket, std::vector<PrepareTicket>> tickets_;  // ours -> each store's
};

}  // namespace vpod::kvcache
