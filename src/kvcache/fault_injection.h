// A VmmProvider wrapper for tests: it forwards every call to a real provider
// and, on request, refuses chosen calls (the k-th map, the k-th page
// creation), holds fences closed until the test opens them, and keeps an
// independent ledger of what is mapped where, so tests can check that no
// address is mapped twice, no page is mapped at two addresses unless the
// cache shares it (prefix caching), no page is released while mapped, and
// nothing is unmapped that was not mapped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kvcache/vmm.h"

namespace vpod::kvcache {

class FaultInjectingProvider final : public VmmProvider {
 public:
  explicit FaultInjectingProvider(std::shared_ptr<VmmProvider> inner);

  // The k-th map() call from now on (k >= 1) fails with an internal Status
  // naming the fault; k = 0 cancels. One-shot.
  void fail_map_call(std::int64_t k);
  // Same for create_page().
  void fail_create_page_call(std::int64_t k);
  // While gated, a Fence recorded under the gate blocks in wait() until
  // open_fences() is called.
  void set_fences_gated(bool gated);
  void open_fences();
  // The next map() call stops inside the call, before mapping, until
  // open_map(); wait_map_gated() returns once a call has stopped there (false
  // after `timeout` without one). Lets a test act while a thread is mid-map.
  void gate_next_map();
  bool wait_map_gated(std::chrono::milliseconds timeout);
  void open_map();

  struct Ledger {
    std::int64_t map_calls = 0;
    std::int64_t unmap_calls = 0;
    std::int64_t pages_mapped_now = 0;  // live mappings
    std::int64_t double_maps = 0;       // an address mapped while already mapped
    std::int64_t shared_maps = 0;       // a page mapped at a second address (prefix caching)
    std::int64_t released_while_mapped = 0;
    std::int64_t bad_unmaps = 0;  // an address unmapped that was not mapped
    std::int64_t injected_failures = 0;
    std::int64_t fence_waits_blocked = 0;  // waits that found the gate closed
  };
  Ledger ledger() const;

  std::string_view name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  std::size_t page_bytes() const override { return inner_->page_bytes(); }
  Status bind_thread() override { return inner_->bind_thread(); }
  Result<void*> reserve(std::size_t bytes) override { return inner_->reserve(bytes); }
  void free_reservation(void* base, std::size_t bytes) override {
    inner_->free_reservation(base, bytes);
  }
  Result<PageHandle> create_page() override;
  void release_page(PageHandle page) override;
  // Addresses the page is mapped at now.
  int mappings_of(PageHandle page) const;
  Status map(void* addr, std::span<const PageHandle> pages) override;
  Status unmap(void* addr, std::size_t num_pages) override;
  Result<std::unique_ptr<Fence>> create_fence() override;

 private:
  class GatedFence;

  std::shared_ptr<VmmProvider> inner_;
  mutable std::mutex mutex_;
  std::condition_variable gate_cv_;
  std::int64_t map_countdown_ = 0;
  std::int64_t create_countdown_ = 0;
  bool gated_ = false;
  bool map_gate_armed_ = false;  // the next map() stops
  bool map_gate_held_ = false;   // a map() is stopped at the gate
  std::uint64_t gate_generation_ = 0;
  Ledger ledger_;
  std::unordered_map<std::uintptr_t, PageHandle> page_at_;  // mapped address -> page
  std::unordered_map<PageHandle, int> mapped_pages_;        // page -> addresses it is mapped at
};

}  // namespace vpod::kvcache
