// The CUDA VmmProvider (cuda_vmm.h): reservations, physical pages, mappings and
// fences through the driver's VMM entry points, on the device's context.

#include "kvcache/cuda_vmm.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include <mutex>

#include "common/cuda_check.h"

namespace vpod::kvcache {
namespace {

// A CUDA event that sleeps when waited on. A null stream records nothing and
// makes wait() synchronize the whole device: safe when the caller cannot name
// the stream its readers ran on.
class CudaFence final : public Fence {
 public:
  explicit CudaFence(cudaEvent_t event) : event_(event) {}
  ~CudaFence() override { VPOD_CUDA_CHECK(cudaEventDestroy(event_)); }
  CudaFence(const CudaFence&) = delete;
  CudaFence& operator=(const CudaFence&) = delete;

  Status record(void* stream) override {
    std::lock_guard lock(mutex_);
    if (stream == nullptr) {
      whole_device_ = true;
      return {};
    }
    whole_device_ = false;
    return cuda_status(cudaEventRecord(event_, static_cast<cudaStream_t>(stream)),
                       "cudaEventRecord(kv fence)");
  }

  Status wait() override {
    bool whole_device = false;
    {
      std::lock_guard lock(mutex_);
      whole_device = whole_device_;
    }
    // Outside the lock: a record() racing this wait captures later work,
    // which only makes the wait longer, never unsafe.
    if (whole_device) return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return cuda_status(cudaEventSynchronize(event_), "cudaEventSynchronize(kv fence)");
  }

 private:
  std::mutex mutex_;
  cudaEvent_t event_ = nullptr;
  bool whole_device_ = false;
};

}  // namespace

Result<std::unique_ptr<CudaVmmProvider>> CudaVmmProvider::create(int device) {
  VPOD_ASSIGN_OR_RETURN(const cuda::DriverApi* api, cuda::driver_api());
  std::unique_ptr<CudaVmmProvider> provider(new CudaVmmProvider());
  provider->api_ = api;
  provider->device_ = device;
  VPOD_RETURN_IF_ERROR(provider->bind_thread());

  CUdevice cu_device = 0;
  VPOD_CU_RETURN_IF_ERROR(api->cuDeviceGet(&cu_device, device), StatusCode::unavailable);
  int vmm = 0;
  VPOD_CU_RETURN_IF_ERROR(
      api->cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                cu_device),
      StatusCode::unavailable);
  if (vmm == 0) {
    return unavailable(
        fmt::format("CUDA device {} does not support virtual memory management", device));
  }

  CUmemAllocationProp& prop = provider->prop_;
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  std::size_t minimum = 0;
  std::size_t recommended = 0;
  VPOD_CU_RETURN_IF_ERROR(
      api->cuMemGetAllocationGranularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      StatusCode::unavailable);
  VPOD_CU_RETURN_IF_ERROR(
      api->cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      StatusCode::unavailable);
  if (minimum == 0) return unavailable("cuMemGetAllocationGranularity returned 0");
  provider->page_bytes_ = minimum;
  provider->recommended_page_bytes_ = recommended;

  provider->access_.location = prop.location;
  provider->access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return provider;
}

Status CudaVmmProvider::bind_thread() {
  VPOD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), StatusCode::unavailable);
  // Any runtime call binds the primary context to this thread; the driver
  // calls below need it current.
  VPOD_CUDA_RETURN_IF_ERROR(cudaFree(nullptr), StatusCode::unavailable);
  CUcontext context = nullptr;
  VPOD_CU_RETURN_IF_ERROR(api_->cuCtxGetCurrent(&context), StatusCode::unavailable);
  if (context == nullptr) return unavailable("no CUDA context is current after cudaSetDevice");
  return {};
}

Status CudaVmmProvider::ensure_context() {
  CUcontext context = nullptr;
  if (api_->cuCtxGetCurrent(&context) == CUDA_SUCCESS && context != nullptr) return {};
  return bind_thread();
}

Result<void*> CudaVmmProvider::reserve(std::size_t bytes) {
  VPOD_CHECK(bytes % page_bytes_ == 0);
  VPOD_RETURN_IF_ERROR(ensure_context());
  CUdeviceptr ptr = 0;
  VPOD_CU_RETURN_IF_ERROR(api_->cuMemAddressReserve(&ptr, bytes, page_bytes_, 0, 0),
                          StatusCode::resource_exhausted);
  return reinterpret_cast<void*>(ptr);
}

void CudaVmmProvider::free_reservation(void* base, std::size_t bytes) {
  VPOD_CU_CHECK(api_->cuMemAddressFree(reinterpret_cast<CUdeviceptr>(base), bytes));
}

Result<PageHandle> CudaVmmProvider::create_page() {
  VPOD_RETURN_IF_ERROR(ensure_context());
  CUmemGenericAllocationHandle handle = 0;
  const CUresult err = api_->cuMemCreate(&handle, page_bytes_, &prop_, 0);
  if (err != CUDA_SUCCESS) {
    return cu_status(
        err, "cuMemCreate(kv page)",
        err == CUDA_ERROR_OUT_OF_MEMORY ? StatusCode::resource_exhausted : StatusCode::internal);
  }
  return static_cast<PageHandle>(handle);
}

void CudaVmmProvider::release_page(PageHandle page) {
  VPOD_CU_CHECK(api_->cuMemRelease(static_cast<CUmemGenericAllocationHandle>(page)));
}

Status CudaVmmProvider::map(void* addr, std::span<const PageHandle> pages) {
  VPOD_RETURN_IF_ERROR(ensure_context());
  const auto base = reinterpret_cast<CUdeviceptr>(addr);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    const CUresult err = api_->cuMemMap(base + i * page_bytes_, page_bytes_, 0,
                                        static_cast<CUmemGenericAllocationHandle>(pages[i]), 0);
    if (err != CUDA_SUCCESS) {
      for (std::size_t j = 0; j < i; ++j)
        VPOD_CU_CHECK(api_->cuMemUnmap(base + j * page_bytes_, page_bytes_));
      return cu_status(err, "cuMemMap(kv page)")
          .with_context(fmt::format("page {} of {}", i + 1, pages.size()));
    }
  }
  // One access call for the whole run: the range is contiguous and mapped.
  const CUresult err = api_->cuMemSetAccess(base, pages.size() * page_bytes_, &access_, 1);
  if (err != CUDA_SUCCESS) {
    for (std::size_t j = 0; j < pages.size(); ++j) {
      VPOD_CU_CHECK(api_->cuMemUnmap(base + j * page_bytes_, page_bytes_));
    }
    return cu_status(err, "cuMemSetAccess(kv pages)")
        .with_context(fmt::format("{} pages", pages.size()));
  }
  return {};
}

Status CudaVmmProvider::unmap(void* addr, std::size_t num_pages) {
  VPOD_RETURN_IF_ERROR(ensure_context());
  const auto base = reinterpret_cast<CUdeviceptr>(addr);
  // Pages were mapped one cuMemMap each, so each is unmapped on its own.
  for (std::size_t i = 0; i < num_pages; ++i) {
    VPOD_CU_RETURN_IF_ERROR(api_->cuMemUnmap(base + i * page_bytes_, page_bytes_),
                            StatusCode::internal);
  }
  return {};
}

Result<std::unique_ptr<Fence>> CudaVmmProvider::create_fence() {
  cudaEvent_t event = nullptr;
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync),
      StatusCode::unavailable);
  return std::unique_ptr<Fence>(std::make_unique<CudaFence>(event));
}

}  // namespace vpod::kvcache
