// The CUDA VmmProvider: cuMemAddressReserve / cuMemCreate / cuMemMap /
// cuMemSetAccess / cuMemUnmap / cuMemRelease / cuMemAddressFree, reached
// through the driver entry points (cuda/driver_api.h; libcuda is never
// linked). The page size is the device's minimum allocation granularity
// (cuMemGetAllocationGranularity; 2 MiB on H100/H200). Fences are CUDA events
// created with cudaEventBlockingSync, so waiting on one sleeps instead of
// spinning a core.
#pragma once

#include <cuda.h>

#include <memory>

#include "cuda/driver_api.h"
#include "kvcache/vmm.h"

namespace vpod::kvcache {

class CudaVmmProvider final : public VmmProvider {
 public:
  // Fails with unavailable when there is no driver, no such device, or the
  // device lacks VMM support.
  static Result<std::unique_ptr<CudaVmmProvider>> create(int device = 0);

  std::string_view name() const override { return "cuda"; }
  Device device() const override { return Device::cuda; }
  std::size_t page_bytes() const override { return page_bytes_; }
  // What the driver recommends for performance (informational).
  std::size_t recommended_page_bytes() const { return recommended_page_bytes_; }
  int device_ordinal() const { return device_; }
  Status bind_thread() override;
  Result<void*> reserve(std::size_t bytes) override;
  void free_reservation(void* base, std::size_t bytes) override;
  Result<PageHandle> create_page() override;
  void release_page(PageHandle page) override;
  Status map(void* addr, std::span<const PageHandle> pages) override;
  Status unmap(void* addr, std::size_t num_pages) override;
  Result<std::unique_ptr<Fence>> create_fence() override;

 private:
  CudaVmmProvider() = default;
  // Driver calls need a current context; any thread may call the provider
  // (the mapper, a test's helper thread, a destructor), so each call makes
  // sure one is current (one cheap cuCtxGetCurrent when it already is).
  Status ensure_context();

  const cuda::DriverApi* api_ = nullptr;
  int device_ = 0;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  std::size_t page_bytes_ = 0;
  std::size_t recommended_page_bytes_ = 0;
};

}  // namespace vpod::kvcache
