// The paged baseline: block tables over one preallocated buffer.
#include "kvcache/paged_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "common/cuda_check.h"
#include "common/splitmix64.h"

namespace vpod::kvcache {
namespace {

// Host pools are page-aligned so vectorized CPU kernels can assume it.
constexpr std::size_t kHostAlignment = 4096;

// What the K/V of a paged block are of: the model (config salt), the shape
// and dtype, and the block size, so no other store's chains meet these.
std::uint64_t paged_store_salt(const PagedKvCacheConfig& config) {
  std::uint64_t h = splitmix64(config.prefix_salt);
  for (const std::uint64_t v : {static_cast<std::uint64_t>(config.shape.num_layers),
                                static_cast<std::uint64_t>(config.shape.num_kv_heads),
                                static_cast<std::uint64_t>(config.shape.head_dim),
                                static_cast<std::uint64_t>(config.shape.dtype),
                                static_cast<std::uint64_t>(config.block_size)})
    h = splitmix64(h ^ v);
  return h;
}

}  // namespace

Result<std::unique_ptr<PagedKvCache>> PagedKvCache::create(const PagedKvCacheConfig& config) {
  VPOD_RETURN_IF_ERROR(config.shape.validate());
  if (config.block_size <= 0 || (config.block_size & (config.block_size - 1)) != 0) {
    return invalid_argument(
        fmt::format("paged KV block size must be a power of two, got {}", config.block_size));
  }
  if (config.max_slots <= 0 || config.max_ctx <= 0) {
    return invalid_argument(fmt::format("paged KV cache needs max_slots, max_ctx > 0, got {}, {}",
                                        config.max_slots, config.max_ctx));
  }
  std::unique_ptr<PagedKvCache> cache(new PagedKvCache(config));
  VPOD_RETURN_IF_ERROR(cache->init());
  return cache;
}

Status PagedKvCache::init() {
  const std::size_t block = block_bytes();
  max_blocks_per_slot_ = (config_.max_ctx + config_.block_size - 1) / config_.block_size;
  // Never more blocks than every slot at max_ctx can hold (as the vAttention
  // cache caps its pool): the rest of the budget could never be used.
  const std::size_t blocks =
      std::min(config_.memory_bytes / block,
               static_cast<std::size_t>(config_.max_slots) * max_blocks_per_slot_);
  if (blocks == 0) {
    return invalid_argument(
        fmt::format("paged KV memory budget of {} bytes is less than one block "
                    "({} bytes)",
                    config_.memory_bytes, block));
  }
  if (blocks > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return invalid_argument(fmt::format("{} KV blocks exceed the int32 block index", blocks));
  }
  num_blocks_ = static_cast<int>(blocks);
  const std::size_t pool_bytes = blocks * block;
  const std::size_t table_entries =
      static_cast<std::size_t>(config_.max_slots) * max_blocks_per_slot_;
  if (config_.device == Device::cuda) {
    VPOD_CUDA_RETURN_IF_ERROR(cudaSetDevice(config_.cuda_device), StatusCode::unavailable);
    VPOD_ASSIGN_OR_RETURN(device_pool_, cuda::DeviceBuffer::allocate(pool_bytes));
    VPOD_ASSIGN_OR_RETURN(device_tables_,
                          cuda::DeviceBuffer::allocate(table_entries * sizeof(std::int32_t)));
    pool_ = device_pool_.as<std::byte>();
  } else {
    const std::size_t rounded = (pool_bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    host_allocation_ = std::aligned_alloc(kHostAlignment, rounded);
    if (host_allocation_ == nullptr) {
      return resource_exhausted(fmt::format("allocating a {} byte host KV pool", pool_bytes));
    }
    pool_ = static_cast<std::byte*>(host_allocation_);
  }
  tables_.assign(table_entries, 0);
  slot_blocks_.assign(config_.max_slots, 0);
  used_tokens_.assign(config_.max_slots, 0);
  active_.assign(config_.max_slots, 0);
  free_blocks_.reserve(num_blocks_);
  for (int b = num_blocks_; b > 0; --b) free_blocks_.push_back(b - 1);  // block 0 on top
  for (int l = 0; l < config_.shape.num_layers; ++l) layer_views_.push_back(layer_view(l));
  promises_ = PromiseLedger(config_.max_slots, num_blocks_);
  targets_.reserve(config_.max_slots);
  to_index_.reserve(static_cast<std::size_t>(config_.max_slots));
  generation_.assign(config_.max_slots, 0);
  if (config_.prefix_caching) {
    // One index entry per block at most: insert() never runs out of room.
    index_ = PrefixIndex(num_blocks_, config_.block_size, paged_store_salt(config_));
    entry_of_block_.assign(num_blocks_, PrefixIndex::kNone);
    block_of_entry_.assign(num_blocks_, -1);
    slot_indexed_.assign(config_.max_slots, 0);
    slot_hashed_.assign(config_.max_slots, 0);
    slot_parent_.assign(config_.max_slots, index_.root(0));
    match_scratch_.reserve(max_blocks_per_slot_);
  }
  return {};
}

PagedKvCache::~PagedKvCache() { std::free(host_allocation_); }

PagedKvView PagedKvCache::layer_view(int layer) const {
  VPOD_CHECK(layer >= 0 && layer < config_.shape.num_layers);
  const KvShape& shape = config_.shape;
  PagedKvView view;
  view.dtype = shape.dtype;
  view.device = config_.device;
  view.num_blocks = num_blocks_;
  view.block_size = config_.block_size;
  view.num_kv_heads = shape.num_kv_heads;
  view.head_dim = shape.head_dim;
  view.head_stride = shape.head_dim;
  view.token_stride = static_cast<std::int64_t>(shape.num_kv_heads) * shape.head_dim;
  view.block_stride = view.token_stride * config_.block_size;
  const std::size_t pool_bytes_per_tensor =
      static_cast<std::size_t>(num_blocks_) * view.block_stride * dtype_size(shape.dtype);
  view.k = pool_ + static_cast<std::size_t>(2 * layer) * pool_bytes_per_tensor;
  view.v = pool_ + static_cast<std::size_t>(2 * layer + 1) * pool_bytes_per_tensor;
  view.block_table =
      config_.device == Device::cuda ? device_tables_.as<const std::int32_t>() : tables_.data();
  view.num_slots = config_.max_slots;
  view.max_blocks_per_slot = max_blocks_per_slot_;
  return view;
}

std::vector<std::int32_t> PagedKvCache::block_table(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  std::lock_guard lock(mutex_);
  const auto row = tables_.begin() + static_cast<std::ptrdiff_t>(slot) * max_blocks_per_slot_;
  return {row, row + slot_blocks_[slot]};
}

Status PagedKvCache::sync_block_tables(cudaStream_t stream) {
  if (config_.device != Device::cuda) return {};
  std::lock_guard lock(mutex_);
  if (!tables_dirty_) return {};
  // From pageable memory cudaMemcpyAsync stages the data before returning, so
  // the host tables may change right after.
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device_tables_.data(), tables_.data(), tables_.size() * sizeof(std::int32_t),
                      cudaMemcpyHostToDevice, stream),
      StatusCode::internal);
  tables_dirty_ = false;
  return {};
}

Status PagedKvCache::check_slot(int slot) const {
  if (slot < 0 || slot >= config_.max_slots) {
    return out_of_range(fmt::format("KV slot {} is not in [0, {})", slot, config_.max_slots));
  }
  return {};
}

Result<int> PagedKvCache::acquire(std::int64_t expected_tokens) {
  std::lock_guard lock(mutex_);
  return acquire_locked(expected_tokens);
}

Result<int> PagedKvCache::acquire_locked(std::int64_t expected_tokens) {
  if (expected_tokens < 0 || expected_tokens > config_.max_ctx) {
    return out_of_range(
        fmt::format("{} tokens is not in [0, max_ctx = {}]", expected_tokens, config_.max_ctx));
  }
  for (int s = 0; s < config_.max_slots; ++s) {
    if (active_[s]) continue;
    active_[s] = 1;
    ++generation_[s];
    used_tokens_[s] = 0;
    if (config_.prefix_caching) {
      slot_indexed_[s] = 0;
      slot_hashed_[s] = 0;
      slot_parent_[s] = index_.root(0);
    }
    return s;
  }
  return resource_exhausted(fmt::format("all {} KV slots are in use", config_.max_slots));
}

Status PagedKvCache::release(int slot, cudaStream_t /*last_reader*/) {
  VPOD_RETURN_IF_ERROR(check_slot(slot));
  std::lock_guard lock(mutex_);
  if (!active_[slot]) return failed_precondition(fmt::format("KV slot {} is not acquired", slot));
  std::int32_t* row = tables_.data() + static_cast<std::size_t>(slot) * max_blocks_per_slot_;
  // Tail first: the free list's top becomes the slot's first block, and an
  // indexed block's holder leaves in the same order, so the request's later
  // blocks are the least recently used (evicted first, as in vLLM).
  for (int i = slot_blocks_[slot]; i > 0; --i) {
    const std::int32_t block = row[i - 1];
    const PrefixIndex::BlockId entry =
        config_.prefix_caching ? entry_of_block_[block] : PrefixIndex::kNone;
    if (entry != PrefixIndex::kNone) {
      index_.drop_ref(entry);
      if (index_.refs(entry) == 0) --referenced_;
    } else {
      free_blocks_.push_back(block);
    }
    row[i - 1] = 0;
  }
  if (config_.prefix_caching) {
    slot_indexed_[slot] = 0;
    slot_hashed_[slot] = 0;
  }
  tables_dirty_ |= slot_blocks_[slot] > 0;
  slot_blocks_[slot] = 0;
  used_tokens_[slot] = 0;
  active_[slot] = 0;
  return {};
}

Status PagedKvCache::ensure_locked(int slot, std::int64_t tokens) {
  VPOD_RETURN_IF_ERROR(check_slot(slot));
  if (tokens < 0 || tokens > config_.max_ctx) {
    return out_of_range(
        fmt::format("{} tokens is not in [0, max_ctx = {}]", tokens, config_.max_ctx));
  }
  if (!active_[slot]) return failed_precondition(fmt::format("KV slot {} is not acquired", slot));
  const auto need = static_cast<int>((tokens + config_.block_size - 1) / config_.block_size);
  const int have = slot_blocks_[slot];
  if (need > have) {
    const int more = need - have;
    const std::int64_t available = available_blocks_locked();
    if (more > available) {
      return resource_exhausted(fmt::format(
          "out of KV blocks: slot {} needs {} more ({} -> {} tokens), {} of {} are free", slot,
          more, static_cast<std::int64_t>(have) * config_.block_size, tokens, available,
          num_blocks_));
    }
    std::int32_t* row = tables_.data() + static_cast<std::size_t>(slot) * max_blocks_per_slot_;
    for (int i = have; i < need; ++i) row[i] = take_block_locked();
    slot_blocks_[slot] = need;
    tables_dirty_ = true;
  }
  used_tokens_[slot] = std::max(used_tokens_[slot], tokens);
  return {};
}

std::int64_t PagedKvCache::available_blocks_locked() const {
  return static_cast<std::int64_t>(free_blocks_.size()) +
         (config_.prefix_caching ? index_.num_unreferenced() : 0);
}

std::int32_t PagedKvCache::take_block_locked() {
  if (!free_blocks_.empty()) {
    const std::int32_t block = free_blocks_.back();
    free_blocks_.pop_back();
    return block;
  }
  const PrefixIndex::BlockId entry = index_.lru();
  VPOD_CHECK_MSG(config_.prefix_caching && entry != PrefixIndex::kNone,
                 "paged KV cache: no block to take");
  const std::int32_t block = block_of_entry_[entry];
  index_.evict(entry);
  entry_of_block_[block] = PrefixIndex::kNone;
  block_of_entry_[entry] = -1;
  ++evictions_;
  return block;
}

Status PagedKvCache::ensure(int slot, std::int64_t tokens) {
  std::lock_guard lock(mutex_);
  return ensure_locked(slot, tokens);
}

Result<PrepareTicket> PagedKvCache::prepare(std::span<const SlotTokens> next) {
  std::lock_guard lock(mutex_);
  for (const SlotTokens& entry : next)
    VPOD_RETURN_IF_ERROR(ensure_locked(entry.slot, entry.tokens));
  return PrepareTicket{0};
}

Status PagedKvCache::wait(PrepareTicket ticket) {
  if (ticket != 0) return invalid_argument("paged KV cache: prepare tickets are always 0");
  return {};
}

// ----------------------------------------------------------------------------
// Admission (KvCapacity)
// ----------------------------------------------------------------------------
int PagedKvCache::match_locked(int num_tokens, const PrefixQuery& prefix) const {
  match_scratch_.clear();
  if (!config_.prefix_caching || prefix.tokens.empty() || num_tokens <= 0) return 0;
  // Never every token: the last one is computed for the logits, so at most
  // floor((tokens - 1) / block_size) blocks (a whole-prompt hit drops its
  // last block), and never past what the slot's table can list.
  const std::int64_t tokens = std::min<std::int64_t>(num_tokens, prefix.tokens.size());
  const int max_blocks = static_cast<int>(
      std::min<std::int64_t>((tokens - 1) / config_.block_size, max_blocks_per_slot_));
  return index_.match(prefix.tokens, prefix.salt, max_blocks, match_scratch_);
}

std::int64_t PagedKvCache::private_units_locked(int slot, std::int64_t promised_tokens) const {
  const std::int64_t indexed = config_.prefix_caching ? slot_indexed_[slot] : 0;
  const std::int64_t blocks = blocks_for_tokens(promised_tokens);
  return std::max<std::int64_t>(0, promises_.promise_units(blocks, blocks) - indexed);
}

void PagedKvCache::sync_promise_locked(int slot) {
  if (!promises_.is_open(slot)) return;  // a slot-level slot holds no promise
  const std::int64_t tokens = promises_.tokens(slot);
  // Lowering a promise is close + open (the ledger only raises); the units
  // moved to `referenced_` in the same breath, so the sum is unchanged.
  promises_.close(slot);
  promises_.open(slot, private_units_locked(slot, tokens), tokens);
}

bool PagedKvCache::can_allocate(int num_tokens, const PrefixQuery& prefix) const {
  if (num_tokens > config_.max_ctx) return false;
  std::lock_guard lock(mutex_);
  if (std::find(active_.begin(), active_.end(), 0) == active_.end()) return false;
  const std::int64_t blocks = blocks_for_tokens(num_tokens);
  // A matched block another slot holds is already counted in `referenced_`;
  // an unreferenced cached one joins it, one block like a fresh one.
  const int matched = match_locked(num_tokens, prefix);
  std::int64_t held_by_others = 0;
  for (int i = 0; i < matched; ++i) held_by_others += index_.refs(match_scratch_[i]) > 0;
  const std::int64_t cost = promises_.promise_units(blocks, blocks) - held_by_others;
  return promises_.used_units() + referenced_ + cost <= promises_.total_units();
}

Allocation PagedKvCache::allocate(int num_tokens, const PrefixQuery& prefix) {
  std::lock_guard lock(mutex_);
  Result<int> acquired = acquire_locked(num_tokens);
  VPOD_CHECK_MSG(acquired.ok(), "KV acquire after can_allocate: " + acquired.status().to_string());
  const int slot = *acquired;
  const int matched = match_locked(num_tokens, prefix);
  if (config_.prefix_caching) {
    std::int32_t* row = tables_.data() + static_cast<std::size_t>(slot) * max_blocks_per_slot_;
    for (int i = 0; i < matched; ++i) {
      const PrefixIndex::BlockId entry = match_scratch_[i];
      if (index_.refs(entry) == 0) ++referenced_;
      index_.add_ref(entry);
      row[i] = block_of_entry_[entry];
    }
    slot_blocks_[slot] = matched;
    slot_indexed_[slot] = matched;
    slot_hashed_[slot] = matched;
    slot_parent_[slot] =
        matched > 0 ? index_.hash(match_scratch_[matched - 1]) : index_.root(prefix.salt);
    used_tokens_[slot] = static_cast<std::int64_t>(matched) * config_.block_size;
    tables_dirty_ |= matched > 0;
  }
  promises_.open(slot, private_units_locked(slot, num_tokens), num_tokens);
  // The invariant admission keeps (paged_kv_cache.h); without prefix caching
  // allocate trusts can_allocate as it always has.
  VPOD_CHECK_MSG(
      !config_.prefix_caching || promises_.used_units() + referenced_ <= promises_.total_units(),
      fmt::format("paged KV promises exceed the pool after allocating {} tokens "
                  "(allocate without can_allocate?)",
                  num_tokens));
  return {.slot = slot, .cached_tokens = matched * config_.block_size};
}

bool PagedKvCache::grow(int slot, int num_tokens) {
  VPOD_CHECK(promises_.is_open(slot));
  if (num_tokens > config_.max_ctx) return false;
  std::lock_guard lock(mutex_);
  const std::int64_t tokens = std::max<std::int64_t>(num_tokens, promises_.tokens(slot));
  const std::int64_t units = private_units_locked(slot, tokens);
  const std::int64_t extra = units - private_units_locked(slot, promises_.tokens(slot));
  if (extra > 0 && promises_.used_units() + referenced_ + extra > promises_.total_units()) {
    return false;
  }
  return promises_.raise(slot, units, num_tokens);
}

void PagedKvCache::free(int slot) {
  VPOD_CHECK(promises_.is_open(slot));
  // Freed blocks are rewritten only by kernels queued later: no reader stream.
  const Status status = release(slot, nullptr);
  VPOD_CHECK_MSG(status.ok(), "KV release: " + status.to_string());
  promises_.close(slot);
}

void PagedKvCache::cache_prompt(int slot, std::span<const std::int32_t> prompt, int computed) {
  if (!config_.prefix_caching) return;
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  std::lock_guard lock(mutex_);
  VPOD_CHECK_MSG(active_[slot], fmt::format("cache_prompt on free KV slot {}", slot));
  index_prompt_locked(slot, prompt, computed);
  // The blocks this step computes may not be allocated yet: then `prompt`
  // (the request's tokens, which outlive its step) is indexed again in
  // prepare(batch).
  const std::int64_t known = std::clamp<std::int64_t>(computed, 0, prompt.size());
  if (slot_hashed_[slot] < known / config_.block_size && to_index_.size() < to_index_.capacity())
    to_index_.push_back({slot, generation_[slot], prompt, computed});
}

void PagedKvCache::index_prompt_locked(int slot, std::span<const std::int32_t> prompt,
                                       int computed) {
  const std::int64_t known = std::clamp<std::int64_t>(computed, 0, prompt.size());
  const int full = std::min<int>(static_cast<int>(known / config_.block_size), slot_blocks_[slot]);
  const std::int32_t* row = tables_.data() + static_cast<std::size_t>(slot) * max_blocks_per_slot_;
  bool indexed_any = false;
  for (int b = slot_hashed_[slot]; b < full; ++b) {
    const std::span<const std::int32_t> tokens =
        prompt.subspan(static_cast<std::size_t>(b) * config_.block_size,
                       static_cast<std::size_t>(config_.block_size));
    const std::int32_t block = row[b];
    PrefixIndex::BlockId entry = entry_of_block_[block];
    if (entry == PrefixIndex::kNone) entry = index_.insert(slot_parent_[slot], tokens);
    if (entry != PrefixIndex::kNone && block_of_entry_[entry] < 0) {
      // Newly indexed, with this slot as its one holder.
      entry_of_block_[block] = entry;
      block_of_entry_[entry] = block;
      ++slot_indexed_[slot];
      ++referenced_;
      indexed_any = true;
    }
    // Someone else's copy of the same block: ours stays private, the chain
    // goes on by content.
    slot_parent_[slot] = entry != PrefixIndex::kNone
                             ? index_.hash(entry)
                             : PrefixIndex::chain(slot_parent_[slot], tokens);
    slot_hashed_[slot] = b + 1;
  }
  if (indexed_any) sync_promise_locked(slot);
}

double PagedKvCache::usage() const {
  return static_cast<double>(used_units()) / static_cast<double>(promises_.total_units());
}

std::int64_t PagedKvCache::used_units() const {
  std::lock_guard lock(mutex_);
  return promises_.used_units() + referenced_;
}

Status PagedKvCache::prepare(const HybridBatch& batch) {
  promises_.step_targets(batch, targets_);
  const Result<PrepareTicket> ticket = prepare(std::span<const SlotTokens>(targets_));
  const Status waited = ticket.ok() ? wait(*ticket) : ticket.status();
  if (waited.ok() && !to_index_.empty()) {
    // The step's blocks are allocated and its kernels, queued next, write
    // them before any later step reads them.
    std::lock_guard lock(mutex_);
    for (const PromptToIndex& p : to_index_) {
      // Only for the owner that reported it (the slot may have changed hands,
      // and the old owner's tokens may be gone).
      if (active_[p.slot] && generation_[p.slot] == p.generation)
        index_prompt_locked(p.slot, p.prompt, p.computed);
    }
  }
  to_index_.clear();
  VPOD_RETURN_IF_ERROR(waited);
  if (config_.device == Device::cuda) {
    // The tables are copied on the legacy stream and waited for: the model's
    // stream does not order after it, and the previous step (whose sampled
    // tokens came back to the host) no longer reads them.
    VPOD_RETURN_IF_ERROR(sync_block_tables(nullptr));
    VPOD_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(nullptr), "block tables"));
  }
  return {};
}

// ----------------------------------------------------------------------------
// Capacity and statistics
// ----------------------------------------------------------------------------
std::int64_t PagedKvCache::capacity_tokens() const {
  return std::min<std::int64_t>(static_cast<std::int64_t>(num_blocks_) * config_.block_size,
                                static_cast<std::int64_t>(config_.max_slots) * config_.max_ctx);
}

std::int64_t PagedKvCache::capacity_tokens(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  std::lock_guard lock(mutex_);
  const std::int64_t blocks = slot_blocks_[slot] + available_blocks_locked();
  return std::min<std::int64_t>(config_.max_ctx, blocks * config_.block_size);
}

std::int64_t PagedKvCache::free_tokens() const {
  std::lock_guard lock(mutex_);
  return available_blocks_locked() * config_.block_size;
}

std::int64_t PagedKvCache::backed_tokens(int slot) const {
  VPOD_CHECK(slot >= 0 && slot < config_.max_slots);
  std::lock_guard lock(mutex_);
  return std::min<std::int64_t>(config_.max_ctx,
                                static_cast<std::int64_t>(slot_blocks_[slot]) * config_.block_size);
}

int PagedKvCache::num_free_slots() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(std::count(active_.begin(), active_.end(), 0));
}

KvStats PagedKvCache::stats() const {
  std::lock_guard lock(mutex_);
  KvStats stats;
  stats.page_bytes = block_bytes();
  stats.pages_total = num_blocks_;
  // Unreferenced cached blocks are free: any growth may evict them.
  stats.pages_free = available_blocks_locked();
  stats.pages_mapped = stats.pages_total - stats.pages_free;
  if (config_.prefix_caching) {
    stats.prefix_blocks_cached = index_.size();
    stats.prefix_blocks_unreferenced = index_.num_unreferenced();
    stats.prefix_evictions = evictions_;
  }
  const auto bytes_per_token = static_cast<std::int64_t>(config_.shape.bytes_per_token());
  for (int s = 0; s < config_.max_slots; ++s) {
    if (!active_[s]) {
      ++stats.free_slots;
      continue;
    }
    ++stats.active_slots;
    const std::int64_t tokens = static_cast<std::int64_t>(slot_blocks_[s]) * config_.block_size;
    stats.tokens_backed += std::min<std::int64_t>(config_.max_ctx, tokens);
    stats.tokens_used += used_tokens_[s];
    stats.bytes_backed += tokens * bytes_per_token;
    stats.bytes_used += used_tokens_[s] * bytes_per_token;
  }
  stats.internal_fragmentation =
      stats.bytes_backed > 0
          ? 1.0 - static_cast<double>(stats.bytes_used) / static_cast<double>(stats.bytes_backed)
          : 0.0;
  return stats;
}

Status PagedKvCache::check_invariants() const {
  std::lock_guard lock(mutex_);
  constexpr int kFree = -1;
  constexpr int kIndexed = -2;
  constexpr int kUnseen = -3;
  std::vector<int> owner(num_blocks_, kUnseen);  // a slot, or kFree / kIndexed
  std::vector<int> listings(num_blocks_, 0);     // tables listing each indexed block
  for (const std::int32_t b : free_blocks_) {
    if (b < 0 || b >= num_blocks_ || owner[b] != kUnseen) {
      return internal_error(fmt::format("free list holds block {} twice or out of range", b));
    }
    owner[b] = kFree;
  }
  if (config_.prefix_caching) {
    for (int b = 0; b < num_blocks_; ++b) {
      const PrefixIndex::BlockId entry = entry_of_block_[b];
      if (entry == PrefixIndex::kNone) continue;
      if (!index_.indexed(entry) || block_of_entry_[entry] != b) {
        return internal_error(fmt::format("block {} and index entry {} disagree", b, entry));
      }
      if (owner[b] == kFree) return internal_error(fmt::format("indexed block {} is free", b));
      owner[b] = kIndexed;
    }
    for (int e = 0; e < num_blocks_; ++e) {
      if (index_.indexed(e) != (block_of_entry_[e] >= 0) ||
          (block_of_entry_[e] >= 0 && entry_of_block_[block_of_entry_[e]] != e)) {
        return internal_error(fmt::format("index entry {} and its block disagree", e));
      }
    }
  }
  for (int s = 0; s < config_.max_slots; ++s) {
    if (!active_[s] && slot_blocks_[s] != 0) {
      return internal_error(fmt::format("released slot {} still holds blocks", s));
    }
    int indexed = 0;
    for (int i = 0; i < slot_blocks_[s]; ++i) {
      const std::int32_t b = tables_[static_cast<std::size_t>(s) * max_blocks_per_slot_ + i];
      if (b >= 0 && b < num_blocks_ && owner[b] == kIndexed) {
        ++listings[b];
        ++indexed;
        continue;
      }
      if (b < 0 || b >= num_blocks_ || owner[b] != kUnseen) {
        return internal_error(fmt::format("block {} of slot {} is also owned by {}", b, s,
                                          b >= 0 && b < num_blocks_ ? owner[b] : kUnseen));
      }
      owner[b] = s;
    }
    if (config_.prefix_caching &&
        (slot_indexed_[s] != indexed || slot_hashed_[s] > slot_blocks_[s])) {
      return internal_error(fmt::format("slot {} counts {} indexed blocks, its table {}", s,
                                        slot_indexed_[s], indexed));
    }
  }
  std::int64_t referenced = 0;
  for (int b = 0; b < num_blocks_; ++b) {
    if (owner[b] == kUnseen) return internal_error(fmt::format("block {} was lost", b));
    if (owner[b] != kIndexed) continue;
    const int refs = index_.refs(entry_of_block_[b]);
    if (refs != listings[b]) {
      return internal_error(
          fmt::format("indexed block {} has {} refs but {} tables list it", b, refs, listings[b]));
    }
    referenced += refs > 0;
  }
  if (referenced != referenced_) {
    return internal_error(
        fmt::format("{} indexed blocks are held, {} counted", referenced, referenced_));
  }
  // The ledger: private promises plus held indexed blocks, within the pool.
  std::int64_t promised = 0;
  for (int s = 0; s < config_.max_slots; ++s) {
    if (promises_.is_open(s)) promised += private_units_locked(s, promises_.tokens(s));
  }
  if (promised != promises_.used_units() ||
      promises_.used_units() + referenced_ > promises_.total_units()) {
    return internal_error(fmt::format("promises: ledger {} (expected {}) + {} shared of {} blocks",
                                      promises_.used_units(), promised, referenced_,
                                      promises_.total_units()));
  }
  if (config_.prefix_caching) return index_.check();
  return {};
}

}  // namespace vpod::kvcache
