// The paged baseline: block tables over one preallocated buffer.
#include "kvcache/paged_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "common/cuda_check.h"

namespace vpod::kvcache {
namespace {

// Host pools are page-aligned so vectorized CPU kernels can assume it.
constexpr std::size_t kHostAlignment = 4096;

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
  if (expected_tokens < 0 || expected_tokens > config_.max_ctx) {
    return out_of_range(
        fmt::format("{} tokens is not in [0, max_ctx = {}]", expected_tokens, config_.max_ctx));
  }
  std::lock_guard lock(mutex_);
  for (int s = 0; s < config_.max_slots; ++s) {
    if (active_[s]) continue;
    active_[s] = 1;
    used_tokens_[s] = 0;
    return s;
  }
  return resource_exhausted(fmt::format("all {} KV slots are in use", config_.max_slots));
}

Status PagedKvCache::release(int slot, cudaStream_t /*last_reader*/) {
  VPOD_RETURN_IF_ERROR(check_slot(slot));
  std::lock_guard lock(mutex_);
  if (!active_[slot]) return failed_precondition(fmt::format("KV slot {} is not acquired", slot));
  std::int32_t* row = tables_.data() + static_cast<std::size_t>(slot) * max_blocks_per_slot_;
  for (int i = slot_blocks_[slot]; i > 0; --i) {
    free_blocks_.push_back(row[i - 1]);
    row[i - 1] = 0;
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
    if (static_cast<std::size_t>(more) > free_blocks_.size()) {
      return resource_exhausted(fmt::format(
          "out of KV blocks: slot {} needs {} more ({} -> {} tokens), {} of {} are free", slot,
          more, static_cast<std::int64_t>(have) * config_.block_size, tokens, free_blocks_.size(),
          num_blocks_));
    }
    std::int32_t* row = tables_.data() + static_cast<std::size_t>(slot) * max_blocks_per_slot_;
    for (int i = have; i < need; ++i) {
      row[i] = free_blocks_.back();
      free_blocks_.pop_back();
    }
    slot_blocks_[slot] = need;
    tables_dirty_ = true;
  }
  used_tokens_[slot] = std::max(used_tokens_[slot], tokens);
  return {};
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
bool PagedKvCache::can_allocate(int num_tokens, const PrefixQuery& /*prefix*/) const {
  if (num_tokens > config_.max_ctx || num_free_slots() == 0) return false;
  const std::int64_t blocks = blocks_for_tokens(num_tokens);
  return promises_.fits(promises_.promise_units(blocks, blocks));
}

Allocation PagedKvCache::allocate(int num_tokens, const PrefixQuery& /*prefix*/) {
  Result<int> slot = acquire(num_tokens);
  VPOD_CHECK_MSG(slot.ok(), "KV acquire after can_allocate: " + slot.status().to_string());
  const std::int64_t blocks = blocks_for_tokens(num_tokens);
  promises_.open(*slot, promises_.promise_units(blocks, blocks), num_tokens);
  return {.slot = *slot, .cached_tokens = 0};
}

bool PagedKvCache::grow(int slot, int num_tokens) {
  VPOD_CHECK(promises_.is_open(slot));
  if (num_tokens > config_.max_ctx) return false;
  const std::int64_t blocks = blocks_for_tokens(num_tokens);
  return promises_.raise(slot, promises_.promise_units(blocks, blocks), num_tokens);
}

void PagedKvCache::free(int slot) {
  VPOD_CHECK(promises_.is_open(slot));
  // Freed blocks are rewritten only by kernels queued later: no reader stream.
  const Status status = release(slot, nullptr);
  VPOD_CHECK_MSG(status.ok(), "KV release: " + status.to_string());
  promises_.close(slot);
}

Status PagedKvCache::prepare(const HybridBatch& batch) {
  promises_.step_targets(batch, targets_);
  VPOD_ASSIGN_OR_RETURN(const PrepareTicket ticket, prepare(std::span<const SlotTokens>(targets_)));
  VPOD_RETURN_IF_ERROR(wait(ticket));
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
  const std::int64_t blocks = slot_blocks_[slot] + static_cast<std::int64_t>(free_blocks_.size());
  return std::min<std::int64_t>(config_.max_ctx, blocks * config_.block_size);
}

std::int64_t PagedKvCache::free_tokens() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(free_blocks_.size()) * config_.block_size;
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
  stats.pages_free = static_cast<std::int64_t>(free_blocks_.size());
  stats.pages_mapped = stats.pages_total - stats.pages_free;
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
  std::vector<int> owner(num_blocks_, -2);
  for (const std::int32_t b : free_blocks_) {
    if (b < 0 || b >= num_blocks_ || owner[b] != -2) {
      return internal_error(fmt::format("free list holds block {} twice or out of range", b));
    }
    owner[b] = -1;
  }
  for (int s = 0; s < config_.max_slots; ++s) {
    if (!active_[s] && slot_blocks_[s] != 0) {
      return internal_error(fmt::format("released slot {} still holds blocks", s));
    }
    for (int i = 0; i < slot_blocks_[s]; ++i) {
      const std::int32_t b = tables_[static_cast<std::size_t>(s) * max_blocks_per_slot_ + i];
      if (b < 0 || b >= num_blocks_ || owner[b] != -2) {
        return internal_error(fmt::format("block {} of slot {} is also owned by {}", b, s,
                                          b >= 0 && b < num_blocks_ ? owner[b] : -3));
      }
      owner[b] = s;
    }
  }
  for (int b = 0; b < num_blocks_; ++b) {
    if (owner[b] == -2) return internal_error(fmt::format("block {} was lost", b));
  }
  return {};
}

}  // namespace vpod::kvcache
