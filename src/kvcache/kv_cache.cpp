// The vAttention KV cache's facade: sizes the ledger, the mapped memory and
// the mapper thread, and implements KvStore (slots, growth, admission) over
// them. See kv_cache.h.
#include "kvcache/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "common/log.h"
#include "common/splitmix64.h"
#include "kvcache/kv_mapper.h"
#include "kvcache/kv_memory.h"

namespace vpod::kvcache {
namespace {

// Largest virtual reservation we ask for. CUDA reserves 16 TiB on an H200 and
// x86-64 user space is 128 TiB; beyond this a configuration is a mistake.
constexpr std::size_t kMaxReservationBytes = std::size_t{64} << 40;

static_assert(KvCache::kPrewarmChunkPages == KvMemory::kPrewarmChunkPages);

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
  PageGeometry& g = geometry_;
  g.page_bytes = provider_->page_bytes();
  g.max_slots = config_.max_slots;
  g.max_ctx = config_.max_ctx;
  const KvShape& shape = config_.shape;
  const std::size_t head_bytes =
      static_cast<std::size_t>(shape.num_kv_heads) * shape.head_dim * dtype_size(shape.dtype);
  if (config_.layout == KvLayout::all_layers) {
    g.num_regions = 2;
    g.region_token_bytes = head_bytes * shape.num_layers;
  } else {
    g.num_regions = 2 * shape.num_layers;
    g.region_token_bytes = head_bytes;
  }
  const std::size_t ctx_bytes = g.region_token_bytes * static_cast<std::size_t>(config_.max_ctx);
  // Explicit padding: the slot stride is a page multiple whatever max_ctx is.
  slot_bytes_ = (ctx_bytes + g.page_bytes - 1) / g.page_bytes * g.page_bytes;
  g.max_depth = static_cast<std::int64_t>(slot_bytes_ / g.page_bytes);
  const std::size_t regions_slots = static_cast<std::size_t>(g.num_regions) * config_.max_slots;
  if (slot_bytes_ > kMaxReservationBytes / regions_slots) {
    return invalid_argument(fmt::format(
        "KV reservation of {} slots x {} tokens ({} regions of {} bytes per slot) exceeds {} TiB",
        config_.max_slots, config_.max_ctx, g.num_regions, slot_bytes_,
        kMaxReservationBytes >> 40));
  }
  if (config_.memory_bytes < g.page_bytes * g.num_regions) {
    return invalid_argument(fmt::format(
        "KV memory budget of {} bytes is less than one depth step ({} pages of {} bytes)",
        config_.memory_bytes, g.num_regions, g.page_bytes));
  }
  // The K/V of a block depend on the model, and bytes mean different things
  // under another shape, dtype or layout.
  std::uint64_t store_salt = splitmix64(config_.prefix_salt);
  for (const std::uint64_t part :
       {std::uint64_t(shape.num_layers), std::uint64_t(shape.num_kv_heads),
        std::uint64_t(shape.head_dim), std::uint64_t(shape.dtype), std::uint64_t(config_.layout)}) {
    store_salt = splitmix64(store_salt ^ part);
  }
  VPOD_ASSIGN_OR_RETURN(memory_, KvMemory::create(provider_, g, config_.memory_bytes,
                                                  config_.prefix_caching, store_salt));
  block_tokens_ = memory_->with_state(
      [](const SlotLedger& ledger, const KvStats&) { return ledger.block_tokens(); });
  if (config_.prefix_caching && block_tokens_ == 0) {
    VPOD_LOG_WARN(
        "prefix caching is off: a {}-byte page does not hold a whole number of {}-byte tokens",
        g.page_bytes, g.region_token_bytes);
  }
  shared_steps_.assign(config_.max_slots, 0);
  to_index_.reserve(config_.max_slots);
  for (int l = 0; l < shape.num_layers; ++l) layer_views_.push_back(layer_view(l));
  // One unit of promise = one depth step: a page in each region.
  const std::int64_t total_steps = memory_->with_state([](const SlotLedger& ledger,
                                                          const KvStats&) {
    return ledger.num_pages();
  }) / g.num_regions;
  promises_ = PromiseLedger(config_.max_slots, total_steps);
  targets_.reserve(config_.max_slots);
  if (config_.growth == GrowthMode::background) {
    mapper_ = std::make_unique<KvMapper>(*memory_, config_.lookahead_tokens);
    VPOD_RETURN_IF_ERROR(mapper_->start());
  }
  return {};
}

KvCache::~KvCache() {
  if (memory_ != nullptr) {
    const PrewarmStats prewarm = prewarm_stats();
    const KvStats counters =
        memory_->with_state([](const SlotLedger&, const KvStats& counters) { return counters; });
    VPOD_LOG_DEBUG(
        "KV cache: {} pages mapped ({} by the mapper, {} pre-mapped for {} acquisitions), "
        "{} reclaimed; {} waits for growth, {:.3f} s",
        counters.pages_mapped_total, counters.mapper_pages, prewarm.pages, prewarm.hits,
        counters.pages_reclaimed, counters.wait_calls, counters.wait_seconds);
  }
  mapper_.reset();  // stops and joins the thread before the memory goes
}

// ----------------------------------------------------------------------------
// Sizes and views
// ----------------------------------------------------------------------------
std::int64_t KvCache::slot_depth(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  return memory_->with_state(
      [&](const SlotLedger& ledger, const KvStats&) { return ledger.slot(slot).depth; });
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
  std::byte* base = memory_->base();
  const std::size_t region_bytes = static_cast<std::size_t>(config_.max_slots) * slot_bytes_;
  if (config_.layout == KvLayout::all_layers) {
    // [slots, max_ctx, layers, heads, dim]: layer l starts l*heads*dim in.
    const std::size_t layer_offset = static_cast<std::size_t>(layer) * head_elems * elem;
    view.k = base + layer_offset;
    view.v = base + region_bytes + layer_offset;
    view.token_stride = head_elems * shape.num_layers;
  } else {
    view.k = base + static_cast<std::size_t>(2 * layer) * region_bytes;
    view.v = base + static_cast<std::size_t>(2 * layer + 1) * region_bytes;
    view.token_stride = head_elems;
  }
  return view;
}

// ----------------------------------------------------------------------------
// Slots
// ----------------------------------------------------------------------------
Result<int> KvCache::acquire(std::int64_t expected_tokens) {
  VPOD_RETURN_IF_ERROR(check_tokens(expected_tokens));
  const int slot = memory_->acquire(pages_for_tokens(expected_tokens), {}, 0).slot;
  if (slot < 0) {
    return resource_exhausted(fmt::format("all {} KV slots are in use", config_.max_slots));
  }
  return slot;
}

Status KvCache::release(int slot, cudaStream_t last_reader) {
  VPOD_RETURN_IF_ERROR(check_slot(slot));
  return memory_->release(slot, last_reader, config_.reclaim == ReclaimPolicy::eager);
}

Status KvCache::ensure(int slot, std::int64_t tokens) {
  VPOD_RETURN_IF_ERROR(check_slot(slot));
  VPOD_RETURN_IF_ERROR(check_tokens(tokens));
  const bool active = memory_->with_state(
      [&](const SlotLedger& ledger, const KvStats&) { return ledger.slot(slot).active; });
  if (!active) return failed_precondition(fmt::format("KV slot {} is not acquired", slot));
  {
    const KvMemory::MapLock map_lock = memory_->lock_mapping();
    VPOD_RETURN_IF_ERROR(
        memory_->grow(map_lock, slot, pages_for_tokens(tokens), GrowPolicy{}, false));
  }
  memory_->with_state([&](SlotLedger& ledger, KvStats&) { ledger.note_used(slot, tokens); });
  return {};
}

Result<PrepareTicket> KvCache::prepare(std::span<const SlotTokens> next) {
  for (const SlotTokens& entry : next) {
    VPOD_RETURN_IF_ERROR(check_slot(entry.slot));
    VPOD_RETURN_IF_ERROR(check_tokens(entry.tokens));
  }
  const bool background = config_.growth == GrowthMode::background;
  const auto desired = [&](const SlotTokens& entry) {
    return pages_for_tokens(
        desired_tokens(entry, config_.lookahead_tokens, config_.max_ctx, background));
  };
  bool need_required = false;
  bool need_desired = false;
  VPOD_RETURN_IF_ERROR(memory_->with_state([&](SlotLedger& ledger, KvStats&) -> Status {
    for (const SlotTokens& entry : next) {
      if (!ledger.slot(entry.slot).active) {
        return failed_precondition(fmt::format("prepare: KV slot {} is not acquired", entry.slot));
      }
    }
    for (const SlotTokens& entry : next) {
      ledger.note_used(entry.slot, entry.tokens);
      const std::int64_t depth = ledger.slot(entry.slot).depth;
      need_required |= depth < pages_for_tokens(entry.tokens);
      need_desired |= depth < desired(entry);
    }
    return {};
  }));

  if (!background) {
    // `ahead` rides on the background lookahead; synchronous growth maps on demand.
    const KvMemory::MapLock map_lock = memory_->lock_mapping();
    for (const SlotTokens& entry : next) {
      VPOD_RETURN_IF_ERROR(
          memory_->grow(map_lock, entry.slot, pages_for_tokens(entry.tokens), GrowPolicy{}, false));
    }
    for (const SlotTokens& entry : next) {
      const Status status =
          memory_->grow(map_lock, entry.slot, desired(entry),
                        GrowPolicy{.reclaim = false, .only_active = false}, false);
      if (!status.ok() && status.code() != StatusCode::resource_exhausted) return status;
    }
    return PrepareTicket{0};
  }
  // Everything already backed (a queued truncation still needs the mapper).
  if (!need_desired && !memory_->has_truncations()) return PrepareTicket{0};
  return mapper_->post(next, need_required);
}

Status KvCache::wait(PrepareTicket ticket) {
  if (mapper_ != nullptr) return mapper_->wait(ticket);
  if (ticket == 0) return {};
  return invalid_argument(fmt::format("wait: unknown prepare ticket {}", ticket));
}

void KvCache::drain() {
  if (mapper_ != nullptr) mapper_->drain();
}

void KvCache::expect_acquire(std::int64_t expected_tokens, std::int64_t first_tokens) {
  if (mapper_ == nullptr || !config_.eager_allocation) return;
  expected_tokens = std::clamp<std::int64_t>(expected_tokens, 0, config_.max_ctx);
  first_tokens = std::clamp<std::int64_t>(first_tokens, 0, expected_tokens);
  mapper_->expect_acquire(expected_tokens, first_tokens);
}

void KvCache::settle_prewarm() {
  if (mapper_ != nullptr) mapper_->settle_prewarm();
}

Result<std::int64_t> KvCache::reclaim_idle(std::int64_t max_pages) {
  return memory_->reclaim_idle(max_pages);
}

// ----------------------------------------------------------------------------
// Admission (KvCapacity)
// ----------------------------------------------------------------------------
std::int64_t KvCache::promise_units(std::int64_t tokens) const {
  const std::int64_t mapped =
      std::min<std::int64_t>(config_.max_ctx, tokens + config_.lookahead_tokens);
  return promises_.promise_units(pages_for_tokens(tokens), pages_for_tokens(mapped));
}

std::int64_t KvCache::private_units(std::int64_t tokens, const AcquirePlan& plan) const {
  std::int64_t units = std::max<std::int64_t>(0, promise_units(tokens) - plan.shared_steps);
  // Deferred reclamation: the pages an idle slot still holds become the new
  // owner's (acquire() picks the best fit), so they count in its promise.
  if (config_.reclaim == ReclaimPolicy::deferred) units = std::max(units, plan.private_steps);
  return units;
}

int KvCache::max_shared_blocks(int num_tokens) const {
  // The last token is always computed (its logits); a slot never writes
  // into a block, so a fully cached request recomputes its last block.
  return block_tokens_ > 0 ? (num_tokens - 1) / block_tokens_ : 0;
}

bool KvCache::can_allocate(int num_tokens, const PrefixQuery& prefix) const {
  if (num_tokens > config_.max_ctx || num_free_slots() == 0) return false;
  if (mapper_ != nullptr) mapper_->settle_prewarm();  // free slots' depths stay put
  const AcquirePlan plan =
      memory_->plan(pages_for_tokens(num_tokens), prefix, max_shared_blocks(num_tokens));
  return plan.slot >= 0 && promises_.fits(private_units(num_tokens, plan) + plan.newly_pinned);
}

Allocation KvCache::allocate(int num_tokens, const PrefixQuery& prefix) {
  VPOD_CHECK_MSG(num_tokens <= config_.max_ctx, "KV allocate beyond max_ctx");
  if (mapper_ != nullptr) mapper_->settle_prewarm();
  const AcquirePlan plan =
      memory_->acquire(pages_for_tokens(num_tokens), prefix, max_shared_blocks(num_tokens));
  VPOD_CHECK_MSG(plan.slot >= 0, "KV allocate after can_allocate: no free slot");
  promises_.open(plan.slot, private_units(num_tokens, plan), num_tokens);
  shared_steps_[plan.slot] = plan.shared_steps;
  promises_.set_shared(pinned_blocks());
  return {.slot = plan.slot, .cached_tokens = static_cast<int>(plan.shared_steps) * block_tokens_};
}

bool KvCache::grow(int slot, int num_tokens) {
  VPOD_CHECK(promises_.is_open(slot));
  if (num_tokens > config_.max_ctx) return false;
  const std::int64_t units =
      std::max<std::int64_t>(0, promise_units(num_tokens) - shared_steps_[slot]);
  return promises_.raise(slot, units, num_tokens);
}

void KvCache::free(int slot) {
  VPOD_CHECK(promises_.is_open(slot));
  // A request freed before the next prepare() (one that ended with its
  // prefill's first token, e.g. max_tokens 1) still leaves its computed
  // prompt blocks: the step that reported them has completed.
  if (!to_index_.empty()) {
    memory_->with_state([&](SlotLedger& ledger, KvStats&) {
      for (PromptToIndex& p : to_index_) {
        if (p.slot != slot) continue;
        index_reported(ledger, p);
        p.slot = -1;  // done
      }
    });
  }
  const Status status = release(slot, config_.reader_stream);
  VPOD_CHECK_MSG(status.ok(), "KV release: " + status.to_string());
  promises_.close(slot);
  shared_steps_[slot] = 0;
  promises_.set_shared(pinned_blocks());
}

void KvCache::cache_prompt(int slot, std::span<const std::int32_t> prompt, int computed) {
  if (block_tokens_ == 0 || computed < block_tokens_) return;
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  const std::uint64_t generation = memory_->with_state(
      [&](const SlotLedger& ledger, const KvStats&) { return ledger.slot(slot).generation; });
  if (to_index_.size() == to_index_.capacity()) return;  // one per running slot; never allocates
  to_index_.push_back({slot, generation,
                       prompt.first(std::min(prompt.size(), static_cast<std::size_t>(computed)))});
}

Status KvCache::prepare(const HybridBatch& batch) {
  promises_.step_targets(batch, targets_);
  Result<PrepareTicket> ticket = prepare(std::span<const SlotTokens>(targets_));
  if (ticket.ok()) {
    // After the step's own growth is posted (the mapper does that first): the
    // next admission's first chunk, mapped while this step runs.
    expect_acquire(next_admission_tokens_, next_admission_chunk_);
  }
  const Status status = ticket.ok() ? wait(*ticket) : ticket.status();
  if (status.ok() && !to_index_.empty()) {
    // The step's pages are mapped and its kernels, queued next, write them
    // before any later step reads them: index its prompts' full steps now.
    memory_->with_state([&](SlotLedger& ledger, KvStats&) {
      for (const PromptToIndex& p : to_index_) index_reported(ledger, p);
    });
    promises_.set_shared(pinned_blocks());
  }
  to_index_.clear();
  return status;
}

void KvCache::index_reported(SlotLedger& ledger, const PromptToIndex& p) {
  // Only for the owner that reported it: the slot may have changed hands
  // since (and the old owner's tokens may be gone); -1: indexed at free().
  if (p.slot < 0 || ledger.slot(p.slot).generation != p.generation) return;
  const std::int64_t indexed = ledger.index_prompt(p.slot, p.tokens);
  if (indexed == 0) return;  // nothing new, or the slot was freed meanwhile
  promises_.lower(p.slot, indexed);
  shared_steps_[p.slot] += indexed;
}

void KvCache::expect_admission(int num_tokens, int first_chunk_tokens) {
  next_admission_tokens_ = std::clamp(num_tokens, 0, config_.max_ctx);
  next_admission_chunk_ = std::clamp<std::int64_t>(first_chunk_tokens, 0, next_admission_tokens_);
}

// ----------------------------------------------------------------------------
// Capacity and statistics
// ----------------------------------------------------------------------------
std::int64_t KvCache::capacity_tokens() const {
  return memory_->with_state(
      [](const SlotLedger& ledger, const KvStats&) { return ledger.capacity_tokens(); });
}

std::int64_t KvCache::capacity_tokens(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  return memory_->with_state(
      [&](const SlotLedger& ledger, const KvStats&) { return ledger.capacity_tokens(slot); });
}

std::int64_t KvCache::free_tokens() const {
  return memory_->with_state(
      [](const SlotLedger& ledger, const KvStats&) { return ledger.free_tokens(); });
}

std::int64_t KvCache::backed_tokens(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  return memory_->with_state(
      [&](const SlotLedger& ledger, const KvStats&) { return ledger.backed_tokens(slot); });
}

int KvCache::num_free_slots() const {
  return memory_->with_state(
      [](const SlotLedger& ledger, const KvStats&) { return ledger.num_free_slots(); });
}

KvStats KvCache::stats() const {
  const auto bytes_per_token = static_cast<std::int64_t>(config_.shape.bytes_per_token());
  return memory_->with_state([&](const SlotLedger& ledger, const KvStats& counters) {
    KvStats stats = counters;
    ledger.add_stats(stats, bytes_per_token);
    stats.prefix_blocks_cached = ledger.index().size();
    stats.prefix_blocks_unreferenced = ledger.index().num_unreferenced();
    stats.prefix_evictions = ledger.evictions();
    stats.prefix_truncations = ledger.truncations();
    return stats;
  });
}

bool KvCache::prefix_caching() const { return block_tokens_ > 0; }
int KvCache::prefix_block_tokens() const { return block_tokens_; }

std::int64_t KvCache::pinned_blocks() const {
  return memory_->with_state(
      [](const SlotLedger& ledger, const KvStats&) { return ledger.pinned_blocks(); });
}

KvCache::PrewarmStats KvCache::prewarm_stats() const {
  return memory_->with_state(
      [](const SlotLedger& ledger, const KvStats&) { return ledger.prewarm_stats(); });
}

std::vector<PageId> KvCache::slot_pages(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  return memory_->with_state([&](const SlotLedger& ledger, const KvStats&) {
    const std::int64_t depth = ledger.slot(slot).depth;
    std::vector<PageId> pages;
    pages.reserve(static_cast<std::size_t>(depth) * num_regions());
    for (int r = 0; r < num_regions(); ++r) {
      for (std::int64_t i = 0; i < depth; ++i) pages.push_back(ledger.page(slot, r, i));
    }
    return pages;
  });
}

Status KvCache::check_invariants() const { return memory_->check_invariants(); }

}  // namespace vpod::kvcache
