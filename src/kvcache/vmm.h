// The virtual-memory layer under the vAttention KV cache: reserve a virtual
// range once, create physical pages once, and map/unmap pages into the range
// as requests grow and shrink. Two real providers implement it:
//   - CUDA (cuda_vmm.h): cuMemAddressReserve / cuMemCreate / cuMemMap /
//     cuMemSetAccess / cuMemUnmap, reached through driver entry points;
//   - host (host_vmm.h): an mmap(PROT_NONE) reservation and memfd-backed pages
//     mapped MAP_FIXED|MAP_SHARED, so every allocator behaviour runs in CI.
// The cache logic (kv_cache.h) is written once against VmmProvider.
//
// Thread-safety: every VmmProvider method may be called from any thread,
// concurrently. The RAII owners below are not synchronized: one owner, one
// thread at a time (the cache serializes them under its mapping mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/status.h"
#include "common/tensor_view.h"

namespace vpod::kvcache {

// One physical page: a CUmemGenericAllocationHandle on CUDA, a byte offset in
// the provider's memfd on the host.
using PageHandle = std::uint64_t;

// A point in a GPU stream's work. The cache records one when a slot is
// released and waits on it before unmapping that slot's pages, so a kernel
// still reading them never sees them disappear. Host fences are trivial (no
// asynchronous readers exist).
class Fence {
 public:
  virtual ~Fence() = default;
  // Marks the point after all work queued so far on `stream` (a cudaStream_t).
  // A null stream means "all work on the device".
  virtual Status record(void* stream) = 0;
  // Blocks (without spinning) until the recorded work has completed. Returns
  // at once when nothing was recorded.
  virtual Status wait() = 0;
};

class VmmProvider {
 public:
  virtual ~VmmProvider() = default;

  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  // Mapping granularity: every page is this big and every mapped address is
  // a multiple of it from the reservation's base.
  virtual std::size_t page_bytes() const = 0;
  // Prepares the calling thread for driver calls (makes the device's primary
  // context current). Called once by each thread that maps, e.g. the mapper.
  virtual Status bind_thread() = 0;

  // Raw operations. Prefer the RAII owners below, which call these.
  // `bytes` is a multiple of page_bytes(); the base is page_bytes()-aligned.
  virtual Result<void*> reserve(std::size_t bytes) = 0;
  virtual void free_reservation(void* base, std::size_t bytes) = 0;
  virtual Result<PageHandle> create_page() = 0;
  virtual void release_page(PageHandle page) = 0;
  // Maps pages[i] at addr + i * page_bytes() with read/write access. Either
  // all pages end up mapped or, on failure, none of them (a partial mapping is
  // undone before returning) and the Status carries the driver's/OS's message.
  virtual Status map(void* addr, std::span<const PageHandle> pages) = 0;
  // Unmaps `num_pages` pages mapped one by one (by map) starting at addr.
  virtual Status unmap(void* addr, std::size_t num_pages) = 0;
  virtual Result<std::unique_ptr<Fence>> create_fence() = 0;
};

// A reserved, initially unmapped, virtual address range. Move-only.
class VirtualRange {
 public:
  VirtualRange() = default;
  // `bytes` is rounded up to the provider's page size.
  static Result<VirtualRange> reserve(VmmProvider& provider, std::size_t bytes);
  ~VirtualRange();
  VirtualRange(VirtualRange&& other) noexcept;
  VirtualRange& operator=(VirtualRange&& other) noexcept;
  VirtualRange(const VirtualRange&) = delete;
  VirtualRange& operator=(const VirtualRange&) = delete;

  std::byte* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void reset();
  VmmProvider* provider_ = nullptr;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// One physical page (page_bytes() of device or host memory). Move-only.
class PhysicalPage {
 public:
  PhysicalPage() = default;
  static Result<PhysicalPage> create(VmmProvider& provider);
  ~PhysicalPage();
  PhysicalPage(PhysicalPage&& other) noexcept;
  PhysicalPage& operator=(PhysicalPage&& other) noexcept;
  PhysicalPage(const PhysicalPage&) = delete;
  PhysicalPage& operator=(const PhysicalPage&) = delete;

  PageHandle handle() const { return handle_; }
  explicit operator bool() const { return provider_ != nullptr; }

 private:
  void reset();
  VmmProvider* provider_ = nullptr;
  PageHandle handle_ = 0;
};

// The mapped prefix [addr, addr + num_pages() * page_bytes) of a reserved
// range, at most max_pages long. It grows and shrinks at its tail; the
// destructor unmaps whatever is still mapped. Move-only.
// It does not own the physical pages (the pool does) and does not wait for
// readers: the caller waits on a Fence before shrink().
class Mapping {
 public:
  Mapping() = default;
  Mapping(VmmProvider& provider, std::byte* addr, std::size_t max_pages)
      : provider_(&provider), addr_(addr), max_pages_(max_pages) {}
  ~Mapping();
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  // Maps `pages` right after the current tail. On failure nothing new stays
  // mapped and num_pages() is unchanged.
  Status grow(std::span<const PageHandle> pages);
  // Unmaps the last `count` pages.
  Status shrink(std::size_t count);

  std::byte* addr() const { return addr_; }
  std::size_t num_pages() const { return num_pages_; }
  std::size_t max_pages() const { return max_pages_; }

 private:
  void reset();
  VmmProvider* provider_ = nullptr;
  std::byte* addr_ = nullptr;
  std::size_t max_pages_ = 0;
  std::size_t num_pages_ = 0;
};

}  // namespace vpod::kvcache
