// ReplicatedKvStore (replicated_kv_store.h): every state change goes to every
// rank's store; a disagreement between the stores' ledgers is a bug (they
// are identical and see the same calls), so it is checked, not handled.
#include "kvcache/replicated_kv_store.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/check.h"

namespace vpod::kvcache {

ReplicatedKvStore::ReplicatedKvStore(std::vector<std::unique_ptr<KvStore>> stores)
    : stores_(std::move(stores)) {}

Result<std::unique_ptr<ReplicatedKvStore>> ReplicatedKvStore::create(
    std::vector<std::unique_ptr<KvStore>> stores) {
  if (stores.empty()) return invalid_argument("a replicated KV store needs at least one store");
  const KvStore& first = *stores[0];
  for (std::size_t r = 1; r < stores.size(); ++r) {
    const KvStore& s = *stores[r];
    if (s.max_slots() != first.max_slots() || s.max_ctx() != first.max_ctx() ||
        s.capacity_tokens() != first.capacity_tokens() || s.total_units() != first.total_units()) {
      return invalid_argument(fmt::format(
          "the KV caches of tensor-parallel ranks 0 and {} differ ({} vs {} slots, {} vs {} "
          "tokens of context, {} vs {} tokens of capacity)",
          r, first.max_slots(), s.max_slots(), first.max_ctx(), s.max_ctx(),
          first.capacity_tokens(), s.capacity_tokens()));
    }
  }
  return std::unique_ptr<ReplicatedKvStore>(new ReplicatedKvStore(std::move(stores)));
}

bool ReplicatedKvStore::can_allocate(int num_tokens, const PrefixQuery& prefix) const {
  return std::all_of(stores_.begin(), stores_.end(),
                     [&](const auto& s) { return s->can_allocate(num_tokens, prefix); });
}

Allocation ReplicatedKvStore::allocate(int num_tokens, const PrefixQuery& prefix) {
  const Allocation a = stores_[0]->allocate(num_tokens, prefix);
  for (std::size_t r = 1; r < stores_.size(); ++r) {
    const Allocation b = stores_[r]->allocate(num_tokens, prefix);
    VPOD_CHECK_MSG(b.slot == a.slot && b.cached_tokens == a.cached_tokens,
                   fmt::format("tensor-parallel KV stores diverged: rank 0 gave slot {} ({} "
                               "cached), rank {} slot {} ({} cached)",
                               a.slot, a.cached_tokens, r, b.slot, b.cached_tokens));
  }
  return a;
}

bool ReplicatedKvStore::grow(int slot, int num_tokens) {
  const bool grown = stores_[0]->grow(slot, num_tokens);
  for (std::size_t r = 1; r < stores_.size(); ++r) {
    VPOD_CHECK_MSG(stores_[r]->grow(slot, num_tokens) == grown,
                   "tensor-parallel KV stores diverged on grow");
  }
  return grown;
}

void ReplicatedKvStore::free(int slot) {
  for (auto& s : stores_) s->free(slot);
}

Status ReplicatedKvStore::prepare(const HybridBatch& batch) {
  for (auto& s : stores_) VPOD_RETURN_IF_ERROR(s->prepare(batch));
  return {};
}

void ReplicatedKvStore::cache_prompt(int slot, std::span<const std::int32_t> prompt, int computed) {
  for (auto& s : stores_) s->cache_prompt(slot, prompt, computed);
}

void ReplicatedKvStore::expect_admission(int num_tokens, int first_chunk_tokens) {
  for (auto& s : stores_) s->expect_admission(num_tokens, first_chunk_tokens);
}

Result<int> ReplicatedKvStore::acquire(std::int64_t expected_tokens) {
  VPOD_ASSIGN_OR_RETURN(const int slot, stores_[0]->acquire(expected_tokens));
  for (std::size_t r = 1; r < stores_.size(); ++r) {
    VPOD_ASSIGN_OR_RETURN(const int other, stores_[r]->acquire(expected_tokens));
    VPOD_CHECK_MSG(other == slot, "tensor-parallel KV stores diverged on acquire");
  }
  return slot;
}

Status ReplicatedKvStore::release(int slot, cudaStream_t last_reader) {
  Status first;
  for (std::size_t r = 0; r < stores_.size(); ++r) {
    const Status s = stores_[r]->release(slot, r == 0 ? last_reader : nullptr);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status ReplicatedKvStore::ensure(int slot, std::int64_t tokens) {
  for (auto& s : stores_) VPOD_RETURN_IF_ERROR(s->ensure(slot, tokens));
  return {};
}

Result<PrepareTicket> ReplicatedKvStore::prepare(std::span<const SlotTokens> next) {
  std::vector<PrepareTicket> each;
  each.reserve(stores_.size());
  for (auto& s : stores_) {
    VPOD_ASSIGN_OR_RETURN(const PrepareTicket t, s->prepare(next));
    each.push_back(t);
  }
  const PrepareTicket ours = next_ticket_++;
  tickets_.emplace(ours, std::move(each));
  return ours;
}

Status ReplicatedKvStore::wait(PrepareTicket ticket) {
  if (ticket == 0) return {};
  const auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return invalid_argument(fmt::format("unknown KV ticket {}", ticket));
  const std::vector<PrepareTicket> each = std::move(it->second);
  tickets_.erase(it);
  for (std::size_t r = 0; r < stores_.size(); ++r) VPOD_RETURN_IF_ERROR(stores_[r]->wait(each[r]));
  return {};
}

std::int64_t ReplicatedKvStore::capacity_tokens(int slot) const {
  std::int64_t n = stores_[0]->capacity_tokens(slot);
  for (const auto& s : stores_) n = std::min(n, s->capacity_tokens(slot));
  return n;
}

std::int64_t ReplicatedKvStore::free_tokens() const {
  std::int64_t n = stores_[0]->free_tokens();
  for (const auto& s : stores_) n = std::min(n, s->free_tokens());
  return n;
}

std::int64_t ReplicatedKvStore::backed_tokens(int slot) const {
  std::int64_t n = stores_[0]->backed_tokens(slot);
  for (const auto& s : stores_) n = std::min(n, s->backed_tokens(slot));
  return n;
}

}  // namespace vpod::kvcache
