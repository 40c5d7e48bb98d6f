// The host VmmProvider: real demand paging on the CPU. A reservation is an
// mmap(PROT_NONE, MAP_NORESERVE) range; physical pages are page_bytes-sized,
// fallocate'd extents of one memfd; mapping a page is an mmap(MAP_FIXED |
// MAP_SHARED) of its extent into the reservation, unmapping puts PROT_NONE
// anonymous memory back over it (never a hole another mmap could take). Data
// lives in the memfd, so a page keeps its contents across unmap and remap.
// The CPU backend and CI use it; its fences are trivial.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "kvcache/vmm.h"

namespace vpod::kvcache {

class HostVmmProvider final : public VmmProvider {
 public:
  // 2 MiB, the CUDA granularity on H100/H200, so host runs see the same
  // fragmentation as the GPU.
  static constexpr std::size_t default_page_bytes = std::size_t{2} << 20;

  // page_bytes must be a positive multiple of the OS page size.
  static Result<std::unique_ptr<HostVmmProvider>> create(
      std::size_t page_bytes = default_page_bytes);
  ~HostVmmProvider() override;
  HostVmmProvider(const HostVmmProvider&) = delete;
  HostVmmProvider& operator=(const HostVmmProvider&) = delete;

  std::string_view name() const override { return "host"; }
  Device device() const override { return Device::cpu; }
  std::size_t page_bytes() const override { return page_bytes_; }
  Status bind_thread() override { return {}; }
  Result<void*> reserve(std::size_t bytes) override;
  void free_reservation(void* base, std::size_t bytes) override;
  Result<PageHandle> create_page() override;
  void release_page(PageHandle page) override;
  Status map(void* addr, std::span<const PageHandle> pages) override;
  Status unmap(void* addr, std::size_t num_pages) override;
  Result<std::unique_ptr<Fence>> create_fence() override;

 private:
  HostVmmProvider(int fd, std::size_t page_bytes) : fd_(fd), page_bytes_(page_bytes) {}
  // Puts PROT_NONE reserved memory back over [addr, addr + bytes).
  Status rereserve(void* addr, std::size_t bytes);

  const int fd_;
  const std::size_t page_bytes_;
  std::mutex mutex_;                      // guards the two fields below
  std::size_t file_bytes_ = 0;            // the memfd's size
  std::vector<PageHandle> free_extents_;  // offsets of released pages
};

}  // namespace vpod::kvcache
