// The vAttention cache's mapped memory: driver calls around the SlotLedger.
#include "kvcache/kv_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <utility>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"

namespace vpod::kvcache {
KvMemory::KvMemory(std::shared_ptr<VmmProvider> provider, const PageGeometry& geometry)
    : provider_(std::move(provider)), geometry_(geometry) {}

Result<std::unique_ptr<KvMemory>> KvMemory::create(std::shared_ptr<VmmProvider> provider,
                                                   const PageGeometry& geometry,
                                                   std::size_t memory_bytes, bool prefix_caching,
                                                   std::uint64_t prefix_salt) {
  std::unique_ptr<KvMemory> memory(new KvMemory(std::move(provider), geometry));
  VPOD_RETURN_IF_ERROR(memory->init(memory_bytes, prefix_caching, prefix_salt));
  return memory;
}

Status KvMemory::init(std::size_t memory_bytes, bool prefix_caching, std::uint64_t prefix_salt) {
  const PageGeometry& g = geometry_;
  const std::size_t slot_bytes = static_cast<std::size_t>(g.max_depth) * g.page_bytes;
  const std::size_t regions_slots = static_cast<std::size_t>(g.num_regions) * g.max_slots;
  VPOD_ASSIGN_OR_RETURN(range_, VirtualRange::reserve(*provider_, regions_slots * slot_bytes));
  // Never hold more pages than every slot at full depth could map: the rest
  // of the budget would be physical memory no request can ever use.
  const std::size_t pool_bytes = std::min(memory_bytes, regions_slots * slot_bytes);
  VPOD_ASSIGN_OR_RETURN(pool_, PagePool::create(*provider_, pool_bytes));
  ledger_ = SlotLedger(g, pool_.num_pages(), prefix_caching, prefix_salt);

  mappings_.reserve(regions_slots);
  fences_.reserve(g.max_slots);
  for (int s = 0; s < g.max_slots; ++s) {
    for (int r = 0; r < g.num_regions; ++r) {
      std::byte* base =
          range_.base() + (static_cast<std::size_t>(r) * g.max_slots + s) * slot_bytes;
      mappings_.emplace_back(*provider_, base, static_cast<std::size_t>(g.max_depth));
    }
    VPOD_ASSIGN_OR_RETURN(std::unique_ptr<Fence> fence, provider_->create_fence());
    fences_.push_back(std::move(fence));
  }
  const std::size_t max_grow_pages = static_cast<std::size_t>(g.num_regions) * g.max_depth;
  scratch_ids_.resize(max_grow_pages);
  scratch_handles_.resize(max_grow_pages);
  scratch_fresh_.resize(max_grow_pages);
  scratch_victims_.reserve(g.max_slots);
  scratch_matched_.reserve(static_cast<std::size_t>(g.max_depth));
  // A slot is truncated at most once per acquire, and acquires between two
  // settles are bounded by the slots (each settles before growing).
  truncations_.reserve(static_cast<std::size_t>(4 * g.max_slots));
  scratch_truncations_.reserve(static_cast<std::size_t>(4 * g.max_slots));
  counters_.page_bytes = g.page_bytes;
  return {};
}

KvMemory::~KvMemory() {
  // Kernels reading active slots left no fence: wait for all device work
  // before the mappings are torn down (mappings_ is destroyed before pool_).
  for (std::size_t s = 0; s < fences_.size(); ++s) {
    if (ledger_.slot(static_cast<int>(s)).active) (void)fences_[s]->record(nullptr);
    const Status status = fences_[s]->wait();
    if (!status.ok()) VPOD_LOG_ERROR("KV cache teardown: {}", status.to_string());
  }
}

// ----------------------------------------------------------------------------
// Release and reclamation
// ----------------------------------------------------------------------------
Status KvMemory::release(int slot, cudaStream_t last_reader, bool eager) {
  MapLock map_lock;
  if (eager) {
    map_lock = lock_mapping();
    VPOD_RETURN_IF_ERROR(settle_truncations(map_lock));
  }
  Victim victim;
  {
    std::lock_guard lock(state_mutex_);
    if (!ledger_.slot(slot).active) {
      return failed_precondition(fmt::format("KV slot {} is not acquired", slot));
    }
    Status recorded = fences_[slot]->record(last_reader);
    if (!recorded.ok()) {
      // Never unmap unfenced: fall back to waiting for the whole device.
      VPOD_LOG_WARN("KV slot {}: {}; fencing on the whole device", slot, recorded.to_string());
      VPOD_RETURN_IF_ERROR(fences_[slot]->record(nullptr));
    }
    victim = ledger_.release(slot, eager);
  }
  if (victim.count == 0) return {};
  scratch_victims_.clear();
  scratch_victims_.push_back(victim);
  return reclaim_victims();
}

Status KvMemory::reclaim_victims() {
  for (std::size_t i = 0; i < scratch_victims_.size(); ++i) {
    const Status status = unmap_tail(scratch_victims_[i]);
    if (!status.ok()) {
      // Nothing of victims i.. was unmapped: give them their pages back.
      std::lock_guard lock(state_mutex_);
      for (std::size_t j = i; j < scratch_victims_.size(); ++j)
        ledger_.restore(scratch_victims_[j]);
      return status;
    }
  }
  return {};
}

Status KvMemory::unmap_tail(const Victim& victim) {
  // The slot's last readers must be done before its pages go away.
  const Status fenced = fences_[victim.slot]->wait();
  if (!fenced.ok()) {
    return fenced.with_context(fmt::format("waiting for readers of KV slot {}", victim.slot));
  }
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < geometry_.num_regions; ++r) {
    Mapping& m = mapping(victim.slot, r);
    VPOD_CHECK(m.num_pages() == static_cast<std::size_t>(victim.new_depth + victim.count));
    const Status status = m.shrink(static_cast<std::size_t>(victim.count));
    // Unmapping pages we mapped fails only if the driver/OS state is corrupt.
    VPOD_CHECK_MSG(status.ok(), "unmapping KV pages: " + status.to_string());
  }
  const double seconds = seconds_since(start);
  std::lock_guard lock(state_mutex_);
  ledger_.return_tail(victim);
  counters_.unmap_calls += geometry_.num_regions;
  counters_.pages_unmapped_total += victim.count * geometry_.num_regions;
  counters_.unmap_seconds += seconds;
  return {};
}

Status KvMemory::take_from_idle(std::int64_t pages_needed, int exclude_slot) {
  // Cheapest first: cached blocks nobody maps (bookkeeping only), then idle
  // slots' tails (unmapping; a block there may only lose a holder, so loop).
  for (;;) {
    {
      std::lock_guard lock(state_mutex_);
      while (ledger_.num_free() < pages_needed && ledger_.evict_one()) {
      }
      const std::int64_t free = ledger_.num_free();
      if (free >= pages_needed) return {};
      const std::int64_t idle = ledger_.idle_pages(exclude_slot);
      if (free + idle < pages_needed) {
        return resource_exhausted(fmt::format(
            "out of KV pages: need {} but {} are free and {} are reclaimable from idle slots "
            "(pool of {} pages of {} bytes)",
            pages_needed, free, idle, ledger_.num_pages(), geometry_.page_bytes));
      }
      const int regions = geometry_.num_regions;
      const std::int64_t steps = (pages_needed - free + regions - 1) / regions;
      const std::int64_t planned = ledger_.plan_victims(steps, exclude_slot, scratch_victims_);
      if (planned == 0) {
        return resource_exhausted(fmt::format(
            "out of KV pages: need {}, {} free; the rest is held by running requests' shared "
            "prefix blocks",
            pages_needed, free));
      }
      counters_.pages_reclaimed += planned * regions;
    }
    VPOD_RETURN_IF_ERROR(reclaim_victims());
  }
}

Result<std::int64_t> KvMemory::reclaim_idle(std::int64_t max_pages) {
  if (max_pages < 0) return invalid_argument("reclaim_idle: max_pages must be >= 0");
  const MapLock map_lock = lock_mapping();
  VPOD_RETURN_IF_ERROR(settle_truncations(map_lock));
  std::int64_t planned = 0;
  {
    std::lock_guard lock(state_mutex_);
    planned = ledger_.plan_victims(max_pages / geometry_.num_regions, -1, scratch_victims_);
    counters_.pages_reclaimed += planned * geometry_.num_regions;
  }
  VPOD_RETURN_IF_ERROR(reclaim_victims());
  return planned * geometry_.num_regions;
}

// ----------------------------------------------------------------------------
// Growth
// ----------------------------------------------------------------------------
AcquirePlan KvMemory::plan(std::int64_t need_depth, const PrefixQuery& prefix,
                           int max_blocks) const {
  std::lock_guard lock(state_mutex_);
  ledger_.match(prefix.tokens, prefix.salt, max_blocks, scratch_matched_);
  return ledger_.plan_acquire(need_depth, scratch_matched_);
}

AcquirePlan KvMemory::acquire(std::int64_t need_depth, const PrefixQuery& prefix, int max_blocks) {
  std::lock_guard lock(state_mutex_);
  ledger_.match(prefix.tokens, prefix.salt, max_blocks, scratch_matched_);
  const AcquirePlan plan = ledger_.plan_acquire(need_depth, scratch_matched_);
  if (plan.slot >= 0) (void)ledger_.acquire(plan, scratch_matched_, prefix.salt, truncations_);
  return plan;
}

bool KvMemory::has_truncations() const {
  std::lock_guard lock(state_mutex_);
  return !truncations_.empty();
}

Status KvMemory::settle_truncations(const MapLock& map_lock) {
  VPOD_CHECK(map_lock.owns_lock() && map_lock.mutex() == &map_mutex_);
  {
    std::lock_guard lock(state_mutex_);
    if (truncations_.empty()) return {};
    // In queue order: a slot truncated twice unmaps its older (higher) tail first.
    scratch_truncations_.assign(truncations_.begin(), truncations_.end());
    truncations_.clear();
  }
  for (std::size_t i = 0; i < scratch_truncations_.size(); ++i) {
    const Status status = unmap_tail(scratch_truncations_[i]);
    if (!status.ok()) {
      // A fence could not be waited on: keep the rest queued (nothing unmapped).
      std::lock_guard lock(state_mutex_);
      truncations_.insert(truncations_.begin(), scratch_truncations_.begin() + i,
                          scratch_truncations_.end());
      return status;
    }
  }
  return {};
}

Status KvMemory::grow(const MapLock& map_lock, int slot, std::int64_t target_depth,
                      GrowPolicy policy, bool on_mapper) {
  VPOD_CHECK(map_lock.owns_lock() && map_lock.mutex() == &map_mutex_);
  VPOD_RETURN_IF_ERROR(settle_truncations(map_lock));
  const int regions = geometry_.num_regions;
  std::int64_t from = 0;
  std::int64_t planned = 0;  // leading steps that map the slot's planned blocks
  {
    std::lock_guard lock(state_mutex_);
    if (!ledger_.still_wanted(slot, policy)) return {};
    from = ledger_.slot(slot).depth;
    planned =
        std::clamp<std::int64_t>(std::min(target_depth, ledger_.slot(slot).shared_steps) - from, 0,
                                 std::max<std::int64_t>(0, target_depth - from));
  }
  if (target_depth <= from) return {};
  const std::int64_t count = target_depth - from;
  const std::int64_t fresh = count - planned;
  const std::int64_t needed = fresh * regions;
  const auto context = [&] {
    return fmt::format("growing KV slot {} from {} to {} tokens", slot,
                       geometry_.tokens_for_depth(from), geometry_.tokens_for_depth(target_depth));
  };
  if (policy.reclaim && needed > 0) {
    const Status status = take_from_idle(needed, slot);
    if (!status.ok()) return status.with_context(context());
  }
  const std::span<PageId> fresh_ids(scratch_fresh_.data(), static_cast<std::size_t>(needed));
  const std::span<PageId> ids(scratch_ids_.data(), static_cast<std::size_t>(count * regions));
  {
    std::lock_guard lock(state_mutex_);
    // Released meanwhile (its plan dropped): nobody needs this growth.
    if (!ledger_.still_wanted(slot, policy) ||
        (planned > 0 && ledger_.slot(slot).shared_steps < from + planned))
      return {};
    if (!ledger_.take_free(fresh_ids)) {
      return resource_exhausted(fmt::format("out of KV pages: need {}, {} free (lookahead does "
                                            "not reclaim idle slots)",
                                            needed, ledger_.num_free()))
          .with_context(context());
    }
    // Region r's steps: the planned blocks' pages, then fresh pages.
    if (planned > 0)
      ledger_.planned_pages(slot, from, planned, static_cast<std::size_t>(count), ids);
  }
  for (int r = 0; r < regions; ++r) {
    std::copy_n(fresh_ids.data() + r * fresh, fresh, ids.data() + r * count + planned);
  }
  for (std::int64_t i = 0; i < count * regions; ++i) scratch_handles_[i] = pool_.handle(ids[i]);

  // Region r gets scratch pages [r * count, (r + 1) * count).
  const Clock::time_point start = Clock::now();
  Status status;
  int mapped_regions = 0;
  for (int r = 0; r < regions; ++r) {
    Mapping& m = mapping(slot, r);
    VPOD_CHECK(m.num_pages() == static_cast<std::size_t>(from));
    status = m.grow(std::span<const PageHandle>(scratch_handles_.data() + r * count,
                                                static_cast<std::size_t>(count)));
    if (!status.ok()) break;
    ++mapped_regions;
  }
  const double map_seconds = seconds_since(start);

  if (status.ok()) {
    std::lock_guard lock(state_mutex_);
    counters_.map_calls += regions;
    counters_.map_seconds += map_seconds;
    counters_.pages_mapped_total += count * regions;
    counters_.prefix_pages_mapped += planned * regions;
    // Still the same owner, still planning those blocks (a release drops
    // the plan, and the blocks could be evicted after it).
    if (ledger_.still_wanted(slot, policy) && ledger_.slot(slot).depth == from &&
        (planned == 0 || ledger_.slot(slot).shared_steps >= from + planned)) {
      ledger_.commit(slot, from, count, ids, fresh, /*prewarm=*/policy.only_free);
      if (on_mapper) counters_.mapper_pages += count * regions;
      return {};
    }
    // The slot was released or changed owners while we mapped: the pages go
    // back below (the slot's depth never counted them, so nobody read them).
  } else {
    std::lock_guard lock(state_mutex_);
    counters_.map_calls += mapped_regions + 1;
    counters_.map_seconds += map_seconds;
  }

  // Roll back: these pages were never visible to any reader, so they are
  // unmapped at once, and the fresh ones return to the free list in their
  // original order.
  const Clock::time_point unmap_start = Clock::now();
  for (int r = 0; r < mapped_regions; ++r) {
    const Status undone = mapping(slot, r).shrink(static_cast<std::size_t>(count));
    VPOD_CHECK_MSG(undone.ok(), "rolling back a KV mapping: " + undone.to_string());
  }
  const double unmap_seconds = seconds_since(unmap_start);
  std::lock_guard lock(state_mutex_);
  ledger_.give_back(fresh_ids);
  counters_.unmap_calls += mapped_regions;
  counters_.pages_unmapped_total += mapped_regions * count;
  counters_.unmap_seconds += unmap_seconds;
  if (!status.ok()) return status.with_context(context());
  return {};
}

bool KvMemory::prewarm_chunk(const MapLock& map_lock, std::int64_t expected_tokens,
                             std::int64_t first_tokens) {
  int slot = -1;
  std::int64_t depth = 0;
  std::int64_t step = 0;
  std::uint64_t generation = 0;
  const std::int64_t target = geometry_.pages_for_tokens(first_tokens);
  {
    std::lock_guard lock(state_mutex_);
    // The slot acquire(expected_tokens) would pick now for a request without
    // a prefix hit (with prefix caching, one whose reuse evicts no cached
    // blocks while memory is free). Growing it keeps it the pick: its
    // shortfall shrinks (or it comes to cover the request).
    const std::int64_t need = geometry_.pages_for_tokens(expected_tokens);
    slot = ledger_.prefix_caching() ? ledger_.plan_acquire(need, {}).slot
                                    : ledger_.pick_free_slot(need);
    if (slot < 0) return false;
    depth = ledger_.slot(slot).depth;
    if (depth >= target) return false;
    const int regions = geometry_.num_regions;
    const std::int64_t free_steps = ledger_.num_free() / regions;  // never reclaims
    const std::int64_t chunk_steps = std::max<std::int64_t>(1, kPrewarmChunkPages / regions);
    step = std::min({target - depth, free_steps, chunk_steps});
    if (step <= 0) return false;
    generation = ledger_.slot(slot).generation;
  }
  const Status status =
      grow(map_lock, slot, depth + step,
           GrowPolicy{.reclaim = false, .only_free = true, .generation = generation}, true);
  if (!status.ok()) {
    if (status.code() != StatusCode::resource_exhausted) {
      VPOD_LOG_WARN("KV pre-mapping for the next request: {}", status.to_string());
    }
    return false;
  }
  return depth + step < target;  // if it was acquired meanwhile, the next chunk finds out
}

Status KvMemory::check_invariants() const {
  const MapLock map_lock = lock_mapping();
  std::lock_guard lock(state_mutex_);
  VPOD_RETURN_IF_ERROR(ledger_.check());
  for (int s = 0; s < geometry_.max_slots; ++s) {
    // Truncated steps stay mapped until settle_truncations() unmaps them.
    const std::int64_t depth = ledger_.slot(s).depth + ledger_.slot(s).truncating;
    for (int r = 0; r < geometry_.num_regions; ++r) {
      const Mapping& m = mappings_[static_cast<std::size_t>(s) * geometry_.num_regions + r];
      if (m.num_pages() != static_cast<std::size_t>(depth)) {
        return internal_error(fmt::format("slot {} region {} maps {} pages, depth is {}", s, r,
                                          m.num_pages(), depth));
      }
    }
  }
  return {};
}

}  // namespace vpod::kvcache
