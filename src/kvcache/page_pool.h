// The physical page pool: every page the KV cache will ever map is created
// here, once, from a byte budget, before serving starts, and released when
// the pool is destroyed, so the driver is never asked to create or release
// memory while requests run. Which pages are free is bookkeeping, kept by
// the SlotLedger (slot_ledger.h) as a last-in-first-out list of PageIds:
// LIFO keeps recently used (hot, already-touched) pages in circulation.
//
// Immutable after create(): safe to read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
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
  PageHandle handle(PageId id) const { return pages_[id].handle(); }

 private:
  std::size_t page_bytes_ = 0;
  std::vector<PhysicalPage> pages_;
};

}  // namespace vpod::kvcache
