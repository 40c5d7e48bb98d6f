// The physical page pool (page_pool.h): creates every physical page of the KV
// budget up front.
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
  return pool;
}

}  // namespace vpod::kvcache
