// The physical page pool: every page the KV cache will ever map is created
// here, once, from a byte budget, before serving starts; the step path only
// takes pages from and returns pages to a last-in-first-out free list, so the
// driver is never asked to create or release memory while requests run.
// LIFO keeps recently used (hot, already-touched) pages in circulation.
//
// Not synchronized: the owner (KvCache) guards it with its state mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kvcache/vmm.h"

namespace vpod::kvcache {

// Index of a page in its pool: stable for the pool's lifetime.
using PageId = std::uint32_t;

class PagePool {
 public:
  PagePool() = default;
  // floor(budget_bytes / page_bytes) pages. Fails (resource_exhausted, with
  // the count that could be created) if the device runs out first; pages
  // already created are released again.
  static Result<PagePool> create(VmmProvider& provider, std::size_t budget_bytes);

  std::size_t page_bytes() const { return page_bytes_; }
  std::int64_t num_pages() const { return static_cast<std::int64_t>(pages_.size()); }
  std::int64_t num_free() const { return static_cast<std::int64_t>(free_.size()); }
  PageHandle handle(PageId id) const { return pages_[id].handle(); }

  // The most recently returned page, or nothing when the pool is empty.
  std::optional<PageId> pop();
  void push(PageId id);
  // Whether `id` is currently in the free list (O(1); for invariant checks).
  bool is_free(PageId id) const { return in_free_[id] != 0; }

 private:
  std::size_t page_bytes_ = 0;
  std::vector<PhysicalPage> pages_;
  std::vector<PageId> free_;           // LIFO stack
  std::vector<std::uint8_t> in_free_;  // [num_pages] 1 when in free_
};

}  // namespace vpod::kvcache
