// The fault-injecting VmmProvider for tests (fault_injection.h): forwarding to
// the real provider, the chosen failures, the gates, and the ledger of mappings.

#include "kvcache/fault_injection.h"

#include <fmt/format.h>

#include <utility>

namespace vpod::kvcache {

class FaultInjectingProvider::GatedFence final : public Fence {
 public:
  GatedFence(FaultInjectingProvider& owner, std::unique_ptr<Fence> inner)
      : owner_(owner), inner_(std::move(inner)) {}

  Status record(void* stream) override {
    {
      std::lock_guard lock(owner_.mutex_);
      held_ = owner_.gated_;
      generation_ = owner_.gate_generation_;
    }
    return inner_->record(stream);
  }

  Status wait() override {
    {
      std::unique_lock lock(owner_.mutex_);
      if (held_ && owner_.gate_generation_ == generation_) {
        ++owner_.ledger_.fence_waits_blocked;
        owner_.gate_cv_.wait(lock, [&] { return owner_.gate_generation_ != generation_; });
      }
      held_ = false;
    }
    return inner_->wait();
  }

 private:
  FaultInjectingProvider& owner_;
  std::unique_ptr<Fence> inner_;
  bool held_ = false;  // guarded by owner_.mutex_
  std::uint64_t generation_ = 0;
};

FaultInjectingProvider::FaultInjectingProvider(std::shared_ptr<VmmProvider> inner)
    : inner_(std::move(inner)) {
  VPOD_CHECK(inner_ != nullptr);
}

void FaultInjectingProvider::fail_map_call(std::int64_t k) {
  std::lock_guard lock(mutex_);
  map_countdown_ = k;
}

void FaultInjectingProvider::fail_create_page_call(std::int64_t k) {
  std::lock_guard lock(mutex_);
  create_countdown_ = k;
}

void FaultInjectingProvider::set_fences_gated(bool gated) {
  std::lock_guard lock(mutex_);
  gated_ = gated;
}

void FaultInjectingProvider::open_fences() {
  {
    std::lock_guard lock(mutex_);
    ++gate_generation_;
  }
  gate_cv_.notify_all();
}

void FaultInjectingProvider::gate_next_map() {
  std::lock_guard lock(mutex_);
  map_gate_armed_ = true;
}

bool FaultInjectingProvider::wait_map_gated(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return gate_cv_.wait_for(lock, timeout, [&] { return map_gate_held_; });
}

void FaultInjectingProvider::open_map() {
  {
    std::lock_guard lock(mutex_);
    map_gate_armed_ = false;
    map_gate_held_ = false;
  }
  gate_cv_.notify_all();
}

FaultInjectingProvider::Ledger FaultInjectingProvider::ledger() const {
  std::lock_guard lock(mutex_);
  return ledger_;
}

Result<PageHandle> FaultInjectingProvider::create_page() {
  {
    std::lock_guard lock(mutex_);
    if (create_countdown_ > 0 && --create_countdown_ == 0) {
      ++ledger_.injected_failures;
      return resource_exhausted("injected fault: create_page refused");
    }
  }
  return inner_->create_page();
}

Status FaultInjectingProvider::map(void* addr, std::span<const PageHandle> pages) {
  {
    std::unique_lock lock(mutex_);
    ++ledger_.map_calls;
    if (map_gate_armed_) {
      map_gate_armed_ = false;
      map_gate_held_ = true;
      gate_cv_.notify_all();
      gate_cv_.wait(lock, [&] { return !map_gate_held_; });
    }
    if (map_countdown_ > 0 && --map_countdown_ == 0) {
      ++ledger_.injected_failures;
      return internal_error(
          fmt::format("injected fault: map of {} pages at {} refused", pages.size(), addr));
    }
  }
  VPOD_RETURN_IF_ERROR(inner_->map(addr, pages));
  std::lock_guard lock(mutex_);
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    // A page mapped again must be at a new address (shared); an address
    // mapped twice is always a bug.
    if (mapped_pages_[pages[i]]++ > 0) ++ledger_.shared_maps;
    if (!page_at_.emplace(base + i * inner_->page_bytes(), pages[i]).second) ++ledger_.double_maps;
    ++ledger_.pages_mapped_now;
  }
  return {};
}

Status FaultInjectingProvider::unmap(void* addr, std::size_t num_pages) {
  VPOD_RETURN_IF_ERROR(inner_->unmap(addr, num_pages));
  std::lock_guard lock(mutex_);
  ++ledger_.unmap_calls;
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  for (std::size_t i = 0; i < num_pages; ++i) {
    auto it = page_at_.find(base + i * inner_->page_bytes());
    if (it == page_at_.end()) {
      ++ledger_.bad_unmaps;
      continue;
    }
    if (--mapped_pages_[it->second] == 0) mapped_pages_.erase(it->second);
    page_at_.erase(it);
    --ledger_.pages_mapped_now;
  }
  return {};
}

void FaultInjectingProvider::release_page(PageHandle page) {
  {
    std::lock_guard lock(mutex_);
    if (mapped_pages_.contains(page)) ++ledger_.released_while_mapped;
  }
  inner_->release_page(page);
}

int FaultInjectingProvider::mappings_of(PageHandle page) const {
  std::lock_guard lock(mutex_);
  const auto it = mapped_pages_.find(page);
  return it == mapped_pages_.end() ? 0 : it->second;
}

Result<std::unique_ptr<Fence>> FaultInjectingProvider::create_fence() {
  VPOD_ASSIGN_OR_RETURN(std::unique_ptr<Fence> inner, inner_->create_fence());
  return std::unique_ptr<Fence>(std::make_unique<GatedFence>(*this, std::move(inner)));
}

}  // namespace vpod::kvcache
