// The CUDA driver entry points (driver_api.h): resolves each one through
// cudaGetDriverEntryPointByVersion, once per process.

#include "cuda/driver_api.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include <string>

#include "common/cuda_check.h"

namespace vpod::cuda {
namespace {

// The driver API version each entry point is requested at. 12000 is the
// oldest ABI the CUDA 13 runtime supports; all symbols below exist there.
constexpr unsigned int kDriverAbiVersion = 12000;

template <typename Fn>
Status load_symbol(const char* symbol, Fn& out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(symbol, &fn, kDriverAbiVersion, cudaEnableDefault, &query);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return unavailable(fmt::format("CUDA driver not usable ({}) while resolving {}",
                                   cuda_error_message(err), symbol));
  }
  if (query != cudaDriverEntryPointSuccess || fn == nullptr) {
    return unavailable(fmt::format("CUDA driver has no entry point {} (query result {})", symbol,
                                   static_cast<int>(query)));
  }
  out = reinterpret_cast<Fn>(fn);
  return {};
}

Result<DriverApi> load_driver_api() {
  DriverApi api;
  VPOD_RETURN_IF_ERROR(load_symbol("cuInit", api.cuInit));
  VPOD_RETURN_IF_ERROR(load_symbol("cuDriverGetVersion", api.cuDriverGetVersion));
  VPOD_RETURN_IF_ERROR(load_symbol("cuDeviceGet", api.cuDeviceGet));
  VPOD_RETURN_IF_ERROR(load_symbol("cuDeviceGetAttribute", api.cuDeviceGetAttribute));
  VPOD_RETURN_IF_ERROR(load_symbol("cuCtxGetCurrent", api.cuCtxGetCurrent));
  VPOD_RETURN_IF_ERROR(
      load_symbol("cuMemGetAllocationGranularity", api.cuMemGetAllocationGranularity));
  VPOD_RETURN_IF_ERROR(load_symbol("cuMemAddressReserve", api.cuMemAddressReserve));
  VPOD_RETURN_IF_ERROR(load_symbol("cuMemAddressFree", api.cuMemAddressFree));
  VPOD_RETURN_IF_ERROR(load_symbol("cuMemCreate", api.cuMemCreate));
  VPOD_RETURN_IF_ERROR(load_symbol("cuMemRelease", api.cuMemRelease));
  VPOD_RETURN_IF_ERROR(load_symbol("cuMemMap", api.cuMemMap));
  VPOD_RETURN_IF_ERROR(load_symbol("cuMemUnmap", api.cuMemUnmap));
  VPOD_RETURN_IF_ERROR(load_symbol("cuMemSetAccess", api.cuMemSetAccess));
  VPOD_RETURN_IF_ERROR(load_symbol("cuTensorMapEncodeTiled", api.cuTensorMapEncodeTiled));
  VPOD_CU_RETURN_IF_ERROR(api.cuInit(0), StatusCode::unavailable);
  return api;
}

}  // namespace

Result<const DriverApi*> driver_api() {
  static const Result<DriverApi> loaded = load_driver_api();
  if (!loaded.ok()) return loaded.status();
  return &loaded.value();
}

}  // namespace vpod::cuda
