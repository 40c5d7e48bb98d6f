#include "kvcache/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/log.h"

namespace vpod::kvcache {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Largest virtual reservation we ask for. CUDA reserves 16 TiB on an H200 and
// x86-64 user space is 128 TiB; beyond this a configuration is a mistake.
constexpr std::size_t kMaxReservationBytes = std::size_t{64} << 40;

}  // namespace

std::string_view kv_layout_name(KvLayout layout) {
  return layout == KvLayout::all_layers ? "all-layers" : "per-layer";
}

Result<KvLayout> parse_kv_layout(std::string_view name) {
  if (name == "all-layers") return KvLayout::all_layers;
  if (name == "per-layer") return KvLayout::per_layer;
  return invalid_argument(fmt::format("unknown KV layout '{}' (all-layers or per-layer)", name));
}

KvCache::KvCache(const KvCacheConfig& config, std::shared_ptr<VmmProvider> provider)
    : config_(config), provider_(std::move(provider)) {}

Result<std::unique_ptr<KvCache>> KvCache::create(const KvCacheConfig& config,
                                                 std::shared_ptr<VmmProvider> provider) {
  if (provider == nullptr) return invalid_argument("KvCache needs a VMM provider");
  VPOD_RETURN_IF_ERROR(config.shape.validate());
  if (config.max_slots <= 0 || config.max_ctx <= 0) {
    return invalid_argument(
        fmt::format("KvCache needs max_slots > 0 and max_ctx > 0, got {} and {}", config.max_slots,
                    config.max_ctx));
  }
  if (config.lookahead_tokens < 0) return invalid_argument("lookahead_tokens must be >= 0");
  std::unique_ptr<KvCache> cache(new KvCache(config, std::move(provider)));
  VPOD_RETURN_IF_ERROR(cache->init());
  return cache;
}

Status KvCache::init() {
  page_bytes_ = provider_->page_bytes();
  const KvShape& shape = config_.shape;
  const std::size_t head_bytes =
      static_cast<std::size_t>(shape.num_kv_heads) * shape.head_dim * dtype_size(shape.dtype);
  if (config_.layout == KvLayout::all_layers) {
    num_regions_ = 2;
    region_token_bytes_ = head_bytes * shape.num_layers;
  } else {
    num_regions_ = 2 * shape.num_layers;
    region_token_bytes_ = head_bytes;
  }
  const std::size_t ctx_bytes = region_token_bytes_ * static_cast<std::size_t>(config_.max_ctx);
  // Explicit padding: the slot stride is a page multiple whatever max_ctx is.
  slot_bytes_ = (ctx_bytes + page_bytes_ - 1) / page_bytes_ * page_bytes_;
  max_depth_ = static_cast<std::int64_t>(slot_bytes_ / page_bytes_);
  const std::size_t regions_slots = static_cast<std::size_t>(num_regions_) * config_.max_slots;
  if (slot_bytes_ > kMaxReservationBytes / regions_slots) {
    return invalid_argument(fmt::format(
        "KV reservation of {} slots x {} tokens ({} regions of {} bytes per slot) exceeds {} TiB",
        config_.max_slots, config_.max_ctx, num_regions_, slot_bytes_, kMaxReservationBytes >> 40));
  }
  if (config_.memory_bytes < page_bytes_ * num_regions_) {
    return invalid_argument(fmt::format(
        "KV memory budget of {} bytes is less than one depth step ({} pages of {} bytes)",
        config_.memory_bytes, num_regions_, page_bytes_));
  }
  VPOD_ASSIGN_OR_RETURN(range_, VirtualRange::reserve(*provider_, regions_slots * slot_bytes_));
  // Never hold more pages than every slot at full depth could map: the rest
  // of the budget would be physical memory no request can ever use.
  const std::size_t pool_bytes = std::min(config_.memory_bytes, regions_slots * slot_bytes_);
  VPOD_ASSIGN_OR_RETURN(pool_, PagePool::create(*provider_, pool_bytes));

  slots_.resize(config_.max_slots);
  for (int s = 0; s < config_.max_slots; ++s) {
    Slot& slot = slots_[s];
    slot.pages.assign(static_cast<std::size_t>(num_regions_) * max_depth_, 0);
    slot.mappings.reserve(num_regions_);
    for (int r = 0; r < num_regions_; ++r) {
      std::byte* base =
          range_.base() + (static_cast<std::size_t>(r) * config_.max_slots + s) * slot_bytes_;
      slot.mappings.emplace_back(*provider_, base, static_cast<std::size_t>(max_depth_));
    }
    VPOD_ASSIGN_OR_RETURN(slot.fence, provider_->create_fence());
  }
  const std::size_t max_grow_pages = static_cast<std::size_t>(num_regions_) * max_depth_;
  scratch_ids_.resize(max_grow_pages);
  scratch_handles_.resize(max_grow_pages);
  scratch_victims_.reserve(config_.max_slots);
  want_required_.assign(config_.max_slots, 0);
  want_desired_.assign(config_.max_slots, 0);
  want_generation_.assign(config_.max_slots, 0);
  is_dirty_.assign(config_.max_slots, 0);
  dirty_slots_.reserve(config_.max_slots);
  results_.resize(kTicketHistory);
  counters_.page_bytes = page_bytes_;

  if (config_.growth == GrowthMode::background) {
    mapper_ = std::thread(&KvCache::mapper_main, this);
    std::unique_lock lock(queue_mutex_);
    done_cv_.wait(lock, [&] { return mapper_ready_; });
    if (!mapper_status_.ok()) {
      const Status why = mapper_status_;
      lock.unlock();
      mapper_.join();
      return why.with_context("starting the KV mapper thread");
    }
  }
  return {};
}

KvCache::~KvCache() {
  {
    std::lock_guard lock(state_mutex_);
    VPOD_LOG_DEBUG(
        "KV cache: {} pages mapped ({} by the mapper, {} pre-mapped for {} acquisitions), "
        "{} reclaimed; {} waits for growth, {:.3f} s",
        counters_.pages_mapped_total, counters_.mapper_pages, prewarm_counters_.pages,
        prewarm_counters_.hits, counters_.pages_reclaimed, counters_.wait_calls,
        counters_.wait_seconds);
  }
  if (mapper_.joinable()) {
    {
      std::lock_guard lock(queue_mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    mapper_.join();
  }
  // Kernels reading active slots left no fence: wait for all device work
  // before the mappings are torn down (slots_ is destroyed before pool_).
  for (Slot& slot : slots_) {
    if (slot.active) (void)slot.fence->record(nullptr);
    const Status status = slot.fence->wait();
    if (!status.ok()) VPOD_LOG_ERROR("KV cache teardown: {}", status.to_string());
  }
}

// ----------------------------------------------------------------------------
// Sizes
// ----------------------------------------------------------------------------
std::int64_t KvCache::pages_for_tokens(std::int64_t tokens) const {
  const auto bytes = static_cast<std::size_t>(tokens) * region_token_bytes_;
  return static_cast<std::int64_t>((bytes + page_bytes_ - 1) / page_bytes_);
}

std::int64_t KvCache::tokens_for_pages(std::int64_t pages) const {
  return static_cast<std::int64_t>(static_cast<std::size_t>(pages) * page_bytes_ /
                                   region_token_bytes_);
}

std::int64_t KvCache::tokens_for_depth(std::int64_t depth) const {
  return std::min<std::int64_t>(config_.max_ctx, tokens_for_pages(depth));
}

std::int64_t KvCache::slot_depth(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  std::lock_guard lock(state_mutex_);
  return slots_[slot].depth;
}

Status KvCache::check_slot(int slot) const {
  if (slot < 0 || slot >= config_.max_slots) {
    return out_of_range(fmt::format("KV slot {} is not in [0, {})", slot, config_.max_slots));
  }
  return {};
}

Status KvCache::check_tokens(std::int64_t tokens) const {
  if (tokens < 0 || tokens > config_.max_ctx) {
    return out_of_range(
        fmt::format("{} tokens is not in [0, max_ctx = {}]", tokens, config_.max_ctx));
  }
  return {};
}

KvLayerView KvCache::layer_view(int layer) const {
  VPOD_CHECK(layer >= 0 && layer < config_.shape.num_layers);
  const KvShape& shape = config_.shape;
  const std::size_t elem = dtype_size(shape.dtype);
  const std::int64_t head_elems = static_cast<std::int64_t>(shape.num_kv_heads) * shape.head_dim;
  KvLayerView view;
  view.dtype = shape.dtype;
  view.device = provider_->device();
  view.num_slots = config_.max_slots;
  view.max_ctx = config_.max_ctx;
  view.num_kv_heads = shape.num_kv_heads;
  view.head_dim = shape.head_dim;
  view.slot_stride = static_cast<std::int64_t>(slot_bytes_ / elem);
  view.head_stride = shape.head_dim;
  const std::size_t region_bytes = static_cast<std::size_t>(config_.max_slots) * slot_bytes_;
  if (config_.layout == KvLayout::all_layers) {
    // [slots, max_ctx, layers, heads, dim]: layer l starts l*heads*dim in.
    const std::size_t layer_offset = static_cast<std::size_t>(layer) * head_elems * elem;
    view.k = range_.base() + layer_offset;
    view.v = range_.base() + region_bytes + layer_offset;
    view.token_stride = head_elems * shape.num_layers;
  } else {
    view.k = range_.base() + static_cast<std::size_t>(2 * layer) * region_bytes;
    view.v = range_.base() + static_cast<std::size_t>(2 * layer + 1) * region_bytes;
    view.token_stride = head_elems;
  }
  return view;
}

// ----------------------------------------------------------------------------
// Slots
// ----------------------------------------------------------------------------
int KvCache::pick_free_slot_locked(std::int64_t need) const {
  // Best fit by mapped depth: the smallest surplus if some free slot already
  // covers the request, otherwise the smallest shortfall; ties go to the most
  // recently released slot.
  int best = -1;
  std::pair<int, std::int64_t> best_key{2, 0};
  std::uint64_t best_order = 0;
  for (int s = 0; s < config_.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.active) continue;
    const std::int64_t surplus = slot.depth - need;
    const std::pair<int, std::int64_t> key = surplus >= 0
                                                 ? std::pair<int, std::int64_t>{0, surplus}
                                                 : std::pair<int, std::int64_t>{1, -surplus};
    if (best < 0 || key < best_key || (key == best_key && slot.release_order > best_order)) {
      best = s;
      best_key = key;
      best_order = slot.release_order;
    }
  }
  return best;
}

Result<int> KvCache::acquire(std::int64_t expected_tokens) {
  VPOD_RETURN_IF_ERROR(check_tokens(expected_tokens));
  const std::int64_t need = pages_for_tokens(expected_tokens);
  std::lock_guard lock(state_mutex_);
  const int best = pick_free_slot_locked(need);
  if (best < 0) {
    return resource_exhausted(fmt::format("all {} KV slots are in use", config_.max_slots));
  }
  Slot& slot = slots_[best];
  if (slot.prewarmed && slot.depth > 0) ++prewarm_counters_.hits;
  slot.prewarmed = false;
  slot.active = true;
  slot.used_tokens = 0;
  ++slot.generation;
  return best;
}

Status KvCache::release(int slot_index, cudaStream_t last_reader) {
  VPOD_RETURN_IF_ERROR(check_slot(slot_index));
  std::unique_lock<std::mutex> map_lock;
  if (config_.reclaim == ReclaimPolicy::eager) map_lock = std::unique_lock(map_mutex_);
  Victim victim{slot_index, 0, 0};
  {
    std::lock_guard lock(state_mutex_);
    Slot& slot = slots_[slot_index];
    if (!slot.active) {
      return failed_precondition(fmt::format("KV slot {} is not acquired", slot_index));
    }
    Status recorded = slot.fence->record(last_reader);
    if (!recorded.ok()) {
      // Never unmap unfenced: fall back to waiting for the whole device.
      VPOD_LOG_WARN("KV slot {}: {}; fencing on the whole device", slot_index,
                    recorded.to_string());
      VPOD_RETURN_IF_ERROR(slot.fence->record(nullptr));
    }
    slot.active = false;
    slot.used_tokens = 0;
    slot.prewarmed = false;
    slot.release_order = ++release_counter_;
    if (config_.reclaim == ReclaimPolicy::eager && slot.depth > 0) {
      victim.count = slot.depth;
      slot.depth = 0;
      in_flight_pages_ += victim.count * num_regions_;
    }
  }
  if (victim.count == 0) return {};
  scratch_victims_.clear();
  scratch_victims_.push_back(victim);
  return reclaim_victims();
}

Status KvCache::ensure(int slot, std::int64_t tokens) {
  VPOD_RETURN_IF_ERROR(check_slot(slot));
  VPOD_RETURN_IF_ERROR(check_tokens(tokens));
  {
    std::lock_guard lock(state_mutex_);
    if (!slots_[slot].active) {
      return failed_precondition(fmt::format("KV slot {} is not acquired", slot));
    }
  }
  std::lock_guard map_lock(map_mutex_);
  VPOD_RETURN_IF_ERROR(grow(slot, pages_for_tokens(tokens), GrowPolicy{}, false));
  std::lock_guard lock(state_mutex_);
  slots_[slot].used_tokens = std::max(slots_[slot].used_tokens, tokens);
  return {};
}

// ----------------------------------------------------------------------------
// Growth and reclamation (map_mutex_ held)
// ----------------------------------------------------------------------------
std::int64_t KvCache::idle_pages_locked(int exclude_slot) const {
  std::int64_t pages = 0;
  for (int s = 0; s < config_.max_slots; ++s) {
    if (!slots_[s].active && s != exclude_slot) pages += slots_[s].depth * num_regions_;
  }
  return pages;
}

std::int64_t KvCache::plan_victims_locked(std::int64_t steps, int exclude_slot) {
  scratch_victims_.clear();
  std::int64_t planned = 0;
  while (planned < steps) {
    int pick = -1;
    for (int s = 0; s < config_.max_slots; ++s) {
      const Slot& slot = slots_[s];
      if (slot.active || s == exclude_slot || slot.depth == 0) continue;
      if (pick < 0 || slot.depth > slots_[pick].depth ||
          (slot.depth == slots_[pick].depth && slot.release_order < slots_[pick].release_order)) {
        pick = s;
      }
    }
    if (pick < 0) break;
    Slot& slot = slots_[pick];
    const std::int64_t take = std::min(slot.depth, steps - planned);
    slot.depth -= take;
    if (slot.depth == 0) slot.prewarmed = false;
    in_flight_pages_ += take * num_regions_;
    scratch_victims_.push_back(Victim{pick, slot.depth, take});
    planned += take;
  }
  return planned;
}

Status KvCache::reclaim_victims() {
  for (std::size_t i = 0; i < scratch_victims_.size(); ++i) {
    const Status status = unmap_tail(scratch_victims_[i]);
    if (!status.ok()) {
      // Nothing of victims i.. was unmapped: give them their pages back.
      std::lock_guard lock(state_mutex_);
      for (std::size_t j = i; j < scratch_victims_.size(); ++j) {
        slots_[scratch_victims_[j].slot].depth += scratch_victims_[j].count;
        in_flight_pages_ -= scratch_victims_[j].count * num_regions_;
      }
      return status;
    }
  }
  return {};
}

Status KvCache::unmap_tail(const Victim& victim) {
  Slot& slot = slots_[victim.slot];
  // The slot's last readers must be done before its pages go away.
  const Status fenced = slot.fence->wait();
  if (!fenced.ok()) {
    return fenced.with_context(fmt::format("waiting for readers of KV slot {}", victim.slot));
  }
  const Clock::time_point start = Clock::now();
  for (Mapping& mapping : slot.mappings) {
    VPOD_CHECK(mapping.num_pages() == static_cast<std::size_t>(victim.new_depth + victim.count));
    const Status status = mapping.shrink(static_cast<std::size_t>(victim.count));
    // Unmapping pages we mapped fails only if the driver/OS state is corrupt.
    VPOD_CHECK_MSG(status.ok(), "unmapping KV pages: " + status.to_string());
  }
  const double seconds = seconds_since(start);
  std::lock_guard lock(state_mutex_);
  for (int r = 0; r < num_regions_; ++r) {
    const PageId* region = slot.pages.data() + static_cast<std::size_t>(r) * max_depth_;
    for (std::int64_t i = victim.new_depth + victim.count; i > victim.new_depth; --i) {
      pool_.push(region[i - 1]);
    }
  }
  const std::int64_t pages = victim.count * num_regions_;
  in_flight_pages_ -= pages;
  counters_.unmap_calls += num_regions_;
  counters_.pages_unmapped_total += pages;
  counters_.unmap_seconds += seconds;
  return {};
}

Status KvCache::take_from_idle(std::int64_t pages_needed, int exclude_slot) {
  {
    std::lock_guard lock(state_mutex_);
    const std::int64_t free = pool_.num_free();
    if (free >= pages_needed) return {};
    const std::int64_t idle = idle_pages_locked(exclude_slot);
    if (free + idle < pages_needed) {
      return resource_exhausted(fmt::format(
          "out of KV pages: need {} but {} are free and {} are reclaimable from idle slots "
          "(pool of {} pages of {} bytes)",
          pages_needed, free, idle, pool_.num_pages(), page_bytes_));
    }
    const std::int64_t steps = (pages_needed - free + num_regions_ - 1) / num_regions_;
    const std::int64_t planned = plan_victims_locked(steps, exclude_slot);
    VPOD_CHECK(planned == steps);
    counters_.pages_reclaimed += planned * num_regions_;
  }
  return reclaim_victims();
}

Status KvCache::grow(int slot_index, std::int64_t target_depth, GrowPolicy policy, bool on_mapper) {
  // Whether the growth still belongs to the slot (state_mutex_ held).
  const auto still_wanted = [&](const Slot& slot) {
    const bool same_owner = policy.generation == 0 || slot.generation == policy.generation;
    if (policy.only_active && (!slot.active || !same_owner)) return false;
    if (policy.only_free && (slot.active || !same_owner)) return false;
    return true;
  };
  std::int64_t from = 0;
  {
    std::lock_guard lock(state_mutex_);
    const Slot& slot = slots_[slot_index];
    if (!still_wanted(slot)) return {};
    from = slot.depth;
  }
  if (target_depth <= from) return {};
  const std::int64_t count = target_depth - from;
  const std::int64_t needed = count * num_regions_;
  const auto context = [&] {
    return fmt::format("growing KV slot {} from {} to {} tokens", slot_index,
                       tokens_for_depth(from), tokens_for_depth(target_depth));
  };
  if (policy.reclaim) {
    const Status status = take_from_idle(needed, slot_index);
    if (!status.ok()) return status.with_context(context());
  }
  {
    std::lock_guard lock(state_mutex_);
    if (pool_.num_free() < needed) {
      return resource_exhausted(fmt::format("out of KV pages: need {}, {} free (lookahead does "
                                            "not reclaim idle slots)",
                                            needed, pool_.num_free()))
          .with_context(context());
    }
    for (std::int64_t i = 0; i < needed; ++i) {
      scratch_ids_[i] = *pool_.pop();
      scratch_handles_[i] = pool_.handle(scratch_ids_[i]);
    }
    in_flight_pages_ += needed;
  }

  // Region r gets scratch pages [r * count, (r + 1) * count).
  Slot& slot = slots_[slot_index];
  const Clock::time_point start = Clock::now();
  Status status;
  int mapped_regions = 0;
  for (int r = 0; r < num_regions_; ++r) {
    Mapping& mapping = slot.mappings[r];
    VPOD_CHECK(mapping.num_pages() == static_cast<std::size_t>(from));
    status = mapping.grow(std::span<const PageHandle>(scratch_handles_.data() + r * count,
                                                      static_cast<std::size_t>(count)));
    if (!status.ok()) break;
    ++mapped_regions;
  }
  const double map_seconds = seconds_since(start);

  if (status.ok()) {
    std::lock_guard lock(state_mutex_);
    counters_.map_calls += num_regions_;
    counters_.map_seconds += map_seconds;
    counters_.pages_mapped_total += needed;
    if (still_wanted(slot)) {
      for (int r = 0; r < num_regions_; ++r) {
        std::copy_n(scratch_ids_.data() + r * count, count,
                    slot.pages.data() + static_cast<std::size_t>(r) * max_depth_ + from);
      }
      slot.depth = target_depth;
      in_flight_pages_ -= needed;
      if (on_mapper) counters_.mapper_pages += needed;
      if (policy.only_free) {  // pre-mapped for the next acquire()
        slot.prewarmed = true;
        prewarm_counters_.pages += needed;
      }
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
  // unmapped at once, and return to the pool in their original LIFO order.
  const Clock::time_point unmap_start = Clock::now();
  for (int r = 0; r < mapped_regions; ++r) {
    const Status undone = slot.mappings[r].shrink(static_cast<std::size_t>(count));
    VPOD_CHECK_MSG(undone.ok(), "rolling back a KV mapping: " + undone.to_string());
  }
  const double unmap_seconds = seconds_since(unmap_start);
  std::lock_guard lock(state_mutex_);
  for (std::int64_t i = needed; i > 0; --i) pool_.push(scratch_ids_[i - 1]);
  in_flight_pages_ -= needed;
  counters_.unmap_calls += mapped_regions;
  counters_.pages_unmapped_total += mapped_regions * count;
  counters_.unmap_seconds += unmap_seconds;
  if (!status.ok()) return status.with_context(context());
  return {};
}

Result<std::int64_t> KvCache::reclaim_idle(std::int64_t max_pages) {
  if (max_pages < 0) return invalid_argument("reclaim_idle: max_pages must be >= 0");
  std::lock_guard map_lock(map_mutex_);
  std::int64_t planned = 0;
  {
    std::lock_guard lock(state_mutex_);
    planned = plan_victims_locked(max_pages / num_regions_, -1);
    counters_.pages_reclaimed += planned * num_regions_;
  }
  VPOD_RETURN_IF_ERROR(reclaim_victims());
  return planned * num_regions_;
}

// ----------------------------------------------------------------------------
// prepare / mapper / wait
// ----------------------------------------------------------------------------
Result<PrepareTicket> KvCache::prepare(std::span<const SlotTokens> next) {
  for (const SlotTokens& entry : next) {
    VPOD_RETURN_IF_ERROR(check_slot(entry.slot));
    VPOD_RETURN_IF_ERROR(check_tokens(entry.tokens));
  }
  const std::int64_t max_ctx = config_.max_ctx;
  // `ahead` rides on the background lookahead; synchronous growth maps on demand.
  const bool map_ahead = config_.growth == GrowthMode::background;
  const auto desired_tokens = [&](const SlotTokens& entry) {
    const std::int64_t ahead = map_ahead ? entry.ahead : 0;
    return std::min(max_ctx, std::max(entry.tokens + config_.lookahead_tokens, ahead));
  };
  bool need_required = false;
  bool need_desired = false;
  {
    std::lock_guard lock(state_mutex_);
    for (const SlotTokens& entry : next) {
      if (!slots_[entry.slot].active) {
        return failed_precondition(fmt::format("prepare: KV slot {} is not acquired", entry.slot));
      }
    }
    for (const SlotTokens& entry : next) {
      Slot& slot = slots_[entry.slot];
      slot.used_tokens = std::max(slot.used_tokens, entry.tokens);
      need_required |= slot.depth < pages_for_tokens(entry.tokens);
      need_desired |= slot.depth < pages_for_tokens(desired_tokens(entry));
    }
  }

  if (config_.growth == GrowthMode::synchronous) {
    std::lock_guard map_lock(map_mutex_);
    for (const SlotTokens& entry : next) {
      VPOD_RETURN_IF_ERROR(grow(entry.slot, pages_for_tokens(entry.tokens), GrowPolicy{}, false));
    }
    for (const SlotTokens& entry : next) {
      const Status status = grow(entry.slot, pages_for_tokens(desired_tokens(entry)),
                                 GrowPolicy{.reclaim = false, .only_active = false}, false);
      if (!status.ok() && status.code() != StatusCode::resource_exhausted) return status;
    }
    return PrepareTicket{0};
  }

  if (!need_desired) return PrepareTicket{0};  // everything already backed
  PrepareTicket ticket = 0;
  {
    std::lock_guard lock(queue_mutex_);
    std::lock_guard state_lock(state_mutex_);  // order: queue_mutex_ before state_mutex_
    for (const SlotTokens& entry : next) {
      const int s = entry.slot;
      const std::uint64_t generation = slots_[s].generation;
      if (want_generation_[s] != generation) {
        // The slot changed owners since these wants were posted: drop them.
        want_required_[s] = 0;
        want_desired_[s] = 0;
        want_generation_[s] = generation;
      }
      if (need_required) {
        want_required_[s] = std::max(want_required_[s], pages_for_tokens(entry.tokens));
      }
      want_desired_[s] = std::max(want_desired_[s], pages_for_tokens(desired_tokens(entry)));
      if (!is_dirty_[s]) {
        is_dirty_[s] = 1;
        dirty_slots_.push_back(s);
      }
    }
    const std::uint64_t posted = posted_.load(std::memory_order_relaxed) + 1;
    posted_.store(posted, std::memory_order_release);
    if (need_required) ticket = posted;
  }
  work_cv_.notify_one();
  return ticket;
}

void KvCache::mapper_main() {
  const Status bound = provider_->bind_thread();
  {
    std::lock_guard lock(queue_mutex_);
    mapper_status_ = bound;
    mapper_ready_ = true;
  }
  done_cv_.notify_all();
  if (!bound.ok()) return;

  struct Work {
    int slot;
    std::int64_t required;
    std::int64_t desired;
    std::uint64_t generation;  // the owner that asked
    bool failed;               // required growth failed: no lookahead retry this round
  };
  std::vector<Work> work;
  work.reserve(config_.max_slots);
  std::unique_lock queue_lock(queue_mutex_);
  for (;;) {
    if (dirty_slots_.empty() && prewarm_tokens_ == 0) {
      mapper_idle_ = true;
      done_cv_.notify_all();
    }
    work_cv_.wait(queue_lock,
                  [&] { return stop_ || !dirty_slots_.empty() || prewarm_tokens_ > 0; });
    mapper_idle_ = false;
    if (stop_) return;
    if (dirty_slots_.empty()) {
      // Nothing a step needs: one chunk of pre-mapping for the next acquire(),
      // then look again (posted growth and settle_prewarm() wait at most one chunk).
      const std::int64_t expected = prewarm_expected_;
      const std::int64_t tokens = prewarm_tokens_;
      const std::uint64_t seq = prewarm_seq_;
      prewarm_busy_ = true;
      queue_lock.unlock();
      const Clock::time_point start = Clock::now();
      bool more = false;
      {
        std::lock_guard map_lock(map_mutex_);
        more = prewarm_chunk(expected, tokens);
      }
      const double busy = seconds_since(start);
      {
        std::lock_guard lock(state_mutex_);
        counters_.mapper_busy_seconds += busy;
      }
      queue_lock.lock();
      prewarm_busy_ = false;
      if (!more && prewarm_seq_ == seq) prewarm_tokens_ = 0;  // this hint is done
      done_cv_.notify_all();
      continue;
    }
    const std::uint64_t taken = posted_.load(std::memory_order_acquire);
    const std::uint64_t first = done_ticket_;
    work.clear();
    for (const int s : dirty_slots_) {
      work.push_back(Work{s, want_required_[s], want_desired_[s], want_generation_[s], false});
      want_required_[s] = 0;
      want_desired_[s] = 0;
      is_dirty_[s] = 0;
    }
    dirty_slots_.clear();
    queue_lock.unlock();

    // Required growth first: the step thread is (or soon will be) waiting.
    const Clock::time_point start = Clock::now();
    Status failure;
    for (Work& w : work) {
      if (w.required == 0) continue;
      std::lock_guard map_lock(map_mutex_);
      const Status status =
          grow(w.slot, w.required,
               GrowPolicy{.reclaim = true, .only_active = true, .generation = w.generation}, true);
      if (!status.ok()) {
        w.failed = true;
        if (failure.ok()) failure = status;
      }
    }
    double busy = seconds_since(start);

    queue_lock.lock();
    // Every ticket of the batch shares its outcome (usually one ticket).
    const std::uint64_t oldest_kept = taken >= kTicketHistory ? taken - kTicketHistory + 1 : 1;
    for (std::uint64_t t = std::max(first + 1, oldest_kept); t <= taken; ++t) {
      results_[t % kTicketHistory] = TicketResult{t, failure};
    }
    done_ticket_ = taken;
    done_cv_.notify_all();
    queue_lock.unlock();

    // Lookahead, best effort; abandoned as soon as newer work is posted.
    const Clock::time_point lookahead_start = Clock::now();
    for (const Work& w : work) {
      if (posted_.load(std::memory_order_acquire) != taken) break;
      if (w.failed) continue;  // the waiter gets the failure; state stays rolled back
      std::lock_guard map_lock(map_mutex_);
      const Status status =
          grow(w.slot, w.desired,
               GrowPolicy{.reclaim = false, .only_active = true, .generation = w.generation}, true);
      if (!status.ok() && status.code() != StatusCode::resource_exhausted) {
        VPOD_LOG_WARN("KV lookahead: {}", status.to_string());
      }
    }
    busy += seconds_since(lookahead_start);
    {
      std::lock_guard lock(state_mutex_);
      counters_.mapper_busy_seconds += busy;
    }
    queue_lock.lock();
  }
}

void KvCache::drain() {
  if (config_.growth != GrowthMode::background) return;
  std::unique_lock lock(queue_mutex_);
  done_cv_.wait(lock, [&] {
    return mapper_idle_ && dirty_slots_.empty() && prewarm_tokens_ == 0 && !prewarm_busy_;
  });
}

void KvCache::expect_acquire(std::int64_t expected_tokens, std::int64_t first_tokens) {
  if (config_.growth != GrowthMode::background || !config_.eager_allocation) return;
  expected_tokens = std::clamp<std::int64_t>(expected_tokens, 0, config_.max_ctx);
  first_tokens = std::clamp<std::int64_t>(first_tokens, 0, expected_tokens);
  {
    std::lock_guard lock(queue_mutex_);
    prewarm_expected_ = expected_tokens;
    prewarm_tokens_ = first_tokens;
    ++prewarm_seq_;
  }
  if (first_tokens > 0) work_cv_.notify_one();
}

void KvCache::settle_prewarm() {
  if (config_.growth != GrowthMode::background) return;
  std::unique_lock lock(queue_mutex_);
  if (prewarm_tokens_ != 0) {
    prewarm_tokens_ = 0;
    ++prewarm_seq_;
  }
  done_cv_.wait(lock, [&] { return !prewarm_busy_; });
}

bool KvCache::prewarm_chunk(std::int64_t expected_tokens, std::int64_t first_tokens) {
  int slot = -1;
  std::int64_t depth = 0;
  std::int64_t step = 0;
  std::uint64_t generation = 0;
  const std::int64_t target = pages_for_tokens(first_tokens);
  {
    std::lock_guard lock(state_mutex_);
    // The slot acquire(expected_tokens) would pick now. Growing it keeps it
    // the pick: its shortfall shrinks (or it comes to cover the request).
    slot = pick_free_slot_locked(pages_for_tokens(expected_tokens));
    if (slot < 0) return false;
    depth = slots_[slot].depth;
    if (depth >= target) return false;
    const std::int64_t free_steps = pool_.num_free() / num_regions_;  // never reclaims
    const std::int64_t chunk_steps = std::max<std::int64_t>(1, kPrewarmChunkPages / num_regions_);
    step = std::min({target - depth, free_steps, chunk_steps});
    if (step <= 0) return false;
    generation = slots_[slot].generation;
  }
  const Status status =
      grow(slot, depth + step,
           GrowPolicy{.reclaim = false, .only_free = true, .generation = generation}, true);
  if (!status.ok()) {
    if (status.code() != StatusCode::resource_exhausted) {
      VPOD_LOG_WARN("KV pre-mapping for the next request: {}", status.to_string());
    }
    return false;
  }
  return depth + step < target;  // if it was acquired meanwhile, the next chunk finds out
}

KvCache::PrewarmStats KvCache::prewarm_stats() const {
  std::lock_guard lock(state_mutex_);
  return prewarm_counters_;
}

Status KvCache::wait(PrepareTicket ticket) {
  if (ticket == 0) return {};
  const Clock::time_point start = Clock::now();
  Status result;
  {
    std::unique_lock lock(queue_mutex_);
    if (ticket > posted_.load(std::memory_order_relaxed)) {
      return invalid_argument(fmt::format("wait: unknown prepare ticket {}", ticket));
    }
    done_cv_.wait(lock, [&] { return done_ticket_ >= ticket; });
    const TicketResult& outcome = results_[ticket % kTicketHistory];
    if (outcome.ticket != ticket) {
      return failed_precondition(fmt::format(
          "wait: prepare ticket {} is too old (the last {} are kept)", ticket, kTicketHistory));
    }
    result = outcome.status;
  }
  const double seconds = seconds_since(start);
  std::lock_guard lock(state_mutex_);
  counters_.wait_calls += 1;
  counters_.wait_seconds += seconds;
  return result;
}

// ----------------------------------------------------------------------------
// Capacity and statistics
// ----------------------------------------------------------------------------
std::int64_t KvCache::capacity_tokens() const {
  const std::int64_t pool_tokens = tokens_for_pages(pool_.num_pages() / num_regions_);
  return std::min<std::int64_t>(pool_tokens,
                                static_cast<std::int64_t>(config_.max_slots) * config_.max_ctx);
}

std::int64_t KvCache::capacity_tokens(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  std::lock_guard lock(state_mutex_);
  const std::int64_t available = pool_.num_free() + idle_pages_locked(slot);
  return tokens_for_depth(slots_[slot].depth + available / num_regions_);
}

std::int64_t KvCache::free_tokens() const {
  std::lock_guard lock(state_mutex_);
  const std::int64_t available = pool_.num_free() + idle_pages_locked(-1);
  return tokens_for_pages(available / num_regions_);
}

std::int64_t KvCache::backed_tokens(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  std::lock_guard lock(state_mutex_);
  return tokens_for_depth(slots_[slot].depth);
}

int KvCache::num_free_slots() const {
  std::lock_guard lock(state_mutex_);
  int free = 0;
  for (const Slot& slot : slots_) free += slot.active ? 0 : 1;
  return free;
}

KvStats KvCache::stats() const {
  std::lock_guard lock(state_mutex_);
  KvStats stats = counters_;
  stats.pages_total = pool_.num_pages();
  stats.pages_free = pool_.num_free();
  const auto bytes_per_token = static_cast<std::int64_t>(config_.shape.bytes_per_token());
  for (const Slot& slot : slots_) {
    const std::int64_t pages = slot.depth * num_regions_;
    stats.pages_mapped += pages;
    if (!slot.active) {
      stats.pages_idle += pages;
      ++stats.free_slots;
      continue;
    }
    ++stats.active_slots;
    stats.tokens_backed += tokens_for_depth(slot.depth);
    stats.tokens_used += slot.used_tokens;
    stats.bytes_backed += pages * static_cast<std::int64_t>(page_bytes_);
    stats.bytes_used += slot.used_tokens * bytes_per_token;
  }
  stats.internal_fragmentation =
      stats.bytes_backed > 0
          ? 1.0 - static_cast<double>(stats.bytes_used) / static_cast<double>(stats.bytes_backed)
          : 0.0;
  return stats;
}

std::vector<PageId> KvCache::slot_pages(int slot_index) const {
  VPOD_CHECK(slot_index >= 0 && slot_index < config_.max_slots);
  std::lock_guard lock(state_mutex_);
  const Slot& slot = slots_[slot_index];
  std::vector<PageId> pages;
  pages.reserve(static_cast<std::size_t>(slot.depth) * num_regions_);
  for (int r = 0; r < num_regions_; ++r) {
    const PageId* region = slot.pages.data() + static_cast<std::size_t>(r) * max_depth_;
    pages.insert(pages.end(), region, region + slot.depth);
  }
  return pages;
}

Status KvCache::check_invariants() const {
  std::lock_guard map_lock(map_mutex_);
  std::lock_guard lock(state_mutex_);
  if (in_flight_pages_ != 0) {
    return internal_error(fmt::format("{} KV pages in flight outside a grow", in_flight_pages_));
  }
  std::vector<int> owner(static_cast<std::size_t>(pool_.num_pages()), -1);
  std::int64_t mapped = 0;
  for (int s = 0; s < config_.max_slots; ++s) {
    const Slot& slot = slots_[s];
    if (slot.depth < 0 || slot.depth > max_depth_) {
      return internal_error(
          fmt::format("slot {} has depth {} (max {})", s, slot.depth, max_depth_));
    }
    for (int r = 0; r < num_regions_; ++r) {
      if (slot.mappings[r].num_pages() != static_cast<std::size_t>(slot.depth)) {
        return internal_error(fmt::format("slot {} region {} maps {} pages, depth is {}", s, r,
                                          slot.mappings[r].num_pages(), slot.depth));
      }
      for (std::int64_t i = 0; i < slot.depth; ++i) {
        const PageId id = slot.pages[static_cast<std::size_t>(r) * max_depth_ + i];
        if (id >= owner.size())
          return internal_error(fmt::format("slot {} holds bad page {}", s, id));
        if (pool_.is_free(id)) {
          return internal_error(fmt::format("page {} is mapped in slot {} and free", id, s));
        }
        if (owner[id] != -1) {
          return internal_error(
              fmt::format("page {} is mapped twice (slots {} and {})", id, owner[id], s));
        }
        owner[id] = s;
        ++mapped;
      }
    }
    if (!slot.active && slot.used_tokens != 0) {
      return internal_error(fmt::format("idle slot {} has used tokens", s));
    }
  }
  if (mapped + pool_.num_free() != pool_.num_pages()) {
    return internal_error(fmt::format("pool not conserved: {} mapped + {} free != {} pages", mapped,
                                      pool_.num_free(), pool_.num_pages()));
  }
  return {};
}

}  // namespace vpod::kvcache
