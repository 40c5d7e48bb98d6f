#include "kvcache/page_pool.h"

#include <fmt/format.h>

#include <limits>

namespace vpod::kvcache {

Result<PagePool> PagePool::create(VmmProvider& provider, std::size_t budget_bytes) {
  PagePool pool;
  pool.page_bytes_ = provider.page_bytes();
  const std::size_t count = budget_bytes / pool.page_bytes_;
  if (count > std::numeric_limits<PageId>::max()) {
    return invalid_argument(fmt::format("a KV budget of {} bytes is {} pages, over the limit of {}",
                                        budget_bytes, count, std::numeric_limits<PageId>::max()));
  }
  pool.pages_.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    Result<PhysicalPage> page = PhysicalPage::create(provider);
    if (!page.ok()) {
      return page.status().with_context(
          fmt::format("creating KV page {} of {} ({} bytes each)", i + 1, count, pool.page_bytes_));
    }
    pool.pages_.push_back(std::move(page).value());
  }
  // Pushed in reverse so page 0 is handed out first (addresses then follow
  // creation order in fresh runs, which makes dumps easier to read).
  pool.free_.reserve(count);
  pool.in_free_.assign(count, 1);
  for (std::size_t i = count; i > 0; --i) pool.free_.push_back(static_cast<PageId>(i - 1));
  return pool;
}

std::optional<PageId> PagePool::pop() {
  if (free_.empty()) return std::nullopt;
  const PageId id = free_.back();
  free_.pop_back();
  in_free_[id] = 0;
  return id;
}

void PagePool::push(PageId id) {
  VPOD_CHECK(id < pages_.size());
  VPOD_CHECK_MSG(in_free_[id] == 0, fmt::format("KV page {} returned to the pool twice", id));
  in_free_[id] = 1;
  free_.push_back(id);
}

}  // namespace vpod::kvcache
