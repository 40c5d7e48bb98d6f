// GPU discovery (device_info.h): each GPU's properties and VMM support, the driver
// version, and the choice between the CUDA and CPU backends.

#include "cuda/device_info.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "common/cuda_check.h"
#include "cuda/driver_api.h"

namespace vpod::cuda {
namespace {

// The oldest architecture vpod's kernels are built for (sm_80, A100).
constexpr int kMinComputeMajor = 8;

Status query_vmm(const DriverApi& api, GpuInfo& info) {
  CUdevice device = 0;
  VPOD_CU_RETURN_IF_ERROR(api.cuDeviceGet(&device, info.index), StatusCode::unavailable);
  int vmm = 0;
  VPOD_CU_RETURN_IF_ERROR(
      api.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               device),
      StatusCode::unavailable);
  info.vmm_supported = vmm != 0;
  if (!info.vmm_supported) return {};
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  VPOD_CU_RETURN_IF_ERROR(api.cuMemGetAllocationGranularity(&info.vmm_granularity_min_bytes, &prop,
                                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                          StatusCode::unavailable);
  VPOD_CU_RETURN_IF_ERROR(
      api.cuMemGetAllocationGranularity(&info.vmm_granularity_recommended_bytes, &prop,
                                        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      StatusCode::unavailable);
  return {};
}

}  // namespace

Result<std::vector<GpuInfo>> query_gpus() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unavailable(fmt::format("no usable CUDA GPU: {}", cuda_error_message(err)));
  }
  VPOD_ASSIGN_OR_RETURN(const DriverApi* api, driver_api());
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, i), StatusCode::unavailable);
    GpuInfo info;
    info.index = i;
    info.name = prop.name;
    info.sm_count = prop.multiProcessorCount;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.total_memory_bytes = prop.totalGlobalMem;
    info.shared_memory_per_sm_bytes = prop.sharedMemPerMultiprocessor;
    info.shared_memory_per_block_optin_bytes = prop.sharedMemPerBlockOptin;
    info.l2_cache_bytes = static_cast<std::size_t>(prop.l2CacheSize);
    VPOD_CUDA_RETURN_IF_ERROR(cudaSetDevice(i), StatusCode::unavailable);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    VPOD_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), StatusCode::unavailable);
    info.free_memory_bytes = free_bytes;
    VPOD_RETURN_IF_ERROR(query_vmm(*api, info));
    gpus.push_back(std::move(info));
  }
  if (count > 0) VPOD_CUDA_RETURN_IF_ERROR(cudaSetDevice(0), StatusCode::unavailable);
  return gpus;
}

Result<std::string> driver_version() {
  VPOD_ASSIGN_OR_RETURN(const DriverApi* api, driver_api());
  int version = 0;
  VPOD_CU_RETURN_IF_ERROR(api->cuDriverGetVersion(&version), StatusCode::unavailable);
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

Result<BackendChoice> choose_backend(std::string_view requested) {
  if (requested == "cpu") return BackendChoice{Device::cpu, "CPU backend requested (--device cpu)"};
  if (requested != "auto" && requested != "cuda") {
    return invalid_argument(
        fmt::format("unknown device '{}' (expected auto, cuda or cpu)", requested));
  }
  auto gpus = query_gpus();
  std::string why_not;
  if (!gpus.ok()) {
    why_not = gpus.status().message();
  } else if (gpus->empty()) {
    why_not = "no CUDA GPU found";
  } else {
    const GpuInfo& gpu = gpus->front();
    if (gpu.compute_major < kMinComputeMajor) {
      why_not = fmt::format("GPU 0 ({}) has compute capability {}.{}; vpod needs {}.0 or newer",
                            gpu.name, gpu.compute_major, gpu.compute_minor, kMinComputeMajor);
    } else if (!gpu.vmm_supported) {
      why_not = fmt::format("GPU 0 ({}) does not support CUDA virtual memory management", gpu.name);
    } else {
      return BackendChoice{Device::cuda,
                           fmt::format("CUDA backend on GPU 0 ({}, sm_{}{}, {} SMs)", gpu.name,
                                       gpu.compute_major, gpu.compute_minor, gpu.sm_count)};
    }
  }
  if (requested == "cuda") return unavailable("--device cuda requested but " + why_not);
  return BackendChoice{Device::cpu, why_not + "; using the CPU backend"};
}

}  // namespace vpod::cuda
