// The RAII owners over a VmmProvider (vmm.h): VirtualRange, PhysicalPage and
// Mapping (whose growth rolls back a partial map on failure).

#include "kvcache/vmm.h"

#include <fmt/format.h>

#include <utility>

namespace vpod::kvcache {

// ----------------------------------------------------------------------------
// VirtualRange
// ----------------------------------------------------------------------------
Result<VirtualRange> VirtualRange::reserve(VmmProvider& provider, std::size_t bytes) {
  const std::size_t page = provider.page_bytes();
  if (bytes == 0) return invalid_argument("cannot reserve an empty virtual range");
  if (bytes > SIZE_MAX - page) return invalid_argument("virtual range size overflows");
  const std::size_t rounded = (bytes + page - 1) / page * page;
  VPOD_ASSIGN_OR_RETURN(void* base, provider.reserve(rounded));
  VirtualRange range;
  range.provider_ = &provider;
  range.base_ = static_cast<std::byte*>(base);
  range.bytes_ = rounded;
  return range;
}

VirtualRange::~VirtualRange() { reset(); }

VirtualRange::VirtualRange(VirtualRange&& other) noexcept
    : provider_(std::exchange(other.provider_, nullptr)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

VirtualRange& VirtualRange::operator=(VirtualRange&& other) noexcept {
  if (this != &other) {
    reset();
    provider_ = std::exchange(other.provider_, nullptr);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void VirtualRange::reset() {
  if (provider_ != nullptr) provider_->free_reservation(base_, bytes_);
  provider_ = nullptr;
  base_ = nullptr;
  bytes_ = 0;
}

// ----------------------------------------------------------------------------
// PhysicalPage
// ----------------------------------------------------------------------------
Result<PhysicalPage> PhysicalPage::create(VmmProvider& provider) {
  VPOD_ASSIGN_OR_RETURN(PageHandle handle, provider.create_page());
  PhysicalPage page;
  page.provider_ = &provider;
  page.handle_ = handle;
  return page;
}

PhysicalPage::~PhysicalPage() { reset(); }

PhysicalPage::PhysicalPage(PhysicalPage&& other) noexcept
    : provider_(std::exchange(other.provider_, nullptr)),
      handle_(std::exchange(other.handle_, 0)) {}

PhysicalPage& PhysicalPage::operator=(PhysicalPage&& other) noexcept {
  if (this != &other) {
    reset();
    provider_ = std::exchange(other.provider_, nullptr);
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

void PhysicalPage::reset() {
  if (provider_ != nullptr) provider_->release_page(handle_);
  provider_ = nullptr;
  handle_ = 0;
}

// ----------------------------------------------------------------------------
// Mapping
// ----------------------------------------------------------------------------
Mapping::~Mapping() { reset(); }

Mapping::Mapping(Mapping&& other) noexcept
    : provider_(std::exchange(other.provider_, nullptr)),
      addr_(std::exchange(other.addr_, nullptr)),
      max_pages_(std::exchange(other.max_pages_, 0)),
      num_pages_(std::exchange(other.num_pages_, 0)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    provider_ = std::exchange(other.provider_, nullptr);
    addr_ = std::exchange(other.addr_, nullptr);
    max_pages_ = std::exchange(other.max_pages_, 0);
    num_pages_ = std::exchange(other.num_pages_, 0);
  }
  return *this;
}

Status Mapping::grow(std::span<const PageHandle> pages) {
  VPOD_CHECK(provider_ != nullptr);
  if (pages.empty()) return {};
  if (pages.size() > max_pages_ - num_pages_) {
    return out_of_range(fmt::format("mapping {} more pages exceeds the range ({} of {} mapped)",
                                    pages.size(), num_pages_, max_pages_));
  }
  VPOD_RETURN_IF_ERROR(provider_->map(addr_ + num_pages_ * provider_->page_bytes(), pages));
  num_pages_ += pages.size();
  return {};
}

Status Mapping::shrink(std::size_t count) {
  VPOD_CHECK(count <= num_pages_);
  if (count == 0) return {};
  const std::size_t first = num_pages_ - count;
  VPOD_RETURN_IF_ERROR(provider_->unmap(addr_ + first * provider_->page_bytes(), count));
  num_pages_ = first;
  return {};
}

void Mapping::reset() {
  if (provider_ != nullptr && num_pages_ > 0) {
    // Unmapping pages this object mapped cannot fail unless the driver or the
    // address space is corrupt: that is an invariant violation.
    const Status status = provider_->unmap(addr_, num_pages_);
    VPOD_CHECK_MSG(status.ok(), "unmapping a KV mapping failed: " + status.to_string());
  }
  provider_ = nullptr;
  addr_ = nullptr;
  max_pages_ = 0;
  num_pages_ = 0;
}

}  // namespace vpod::kvcache
