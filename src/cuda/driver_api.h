// The CUDA driver API, reached through cudaGetDriverEntryPointByVersion so that
// vpod never links libcuda: on a machine with no driver, load() returns a
// Status and the CPU backend is used. Only the entry points vpod needs are
// listed (VMM for the KV cache, attributes for `vpod info`, TMA descriptors
// for the attention kernels' K/V loads).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "common/status.h"

namespace vpod::cuda {

struct DriverApi {
  PFN_cuInit_v2000 cuInit = nullptr;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuTensorMapEncodeTiled_v12000 cuTensorMapEncodeTiled = nullptr;
};

// Loads the table once (thread-safe) and returns it, or the reason it cannot:
// no driver, a driver too old for the CUDA 13 runtime, or a missing symbol.
Result<const DriverApi*> driver_api();

}  // namespace vpod::cuda
