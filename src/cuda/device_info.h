// What GPUs this machine has, and which backend vpod should use. Everything
// here works, and says why, on a machine with no driver or no GPU.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor_view.h"

namespace vpod::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
  std::size_t total_memory_bytes = 0;
  std::size_t free_memory_bytes = 0;
  std::size_t shared_memory_per_sm_bytes = 0;
  std::size_t shared_memory_per_block_optin_bytes = 0;
  std::size_t l2_cache_bytes = 0;
  bool vmm_supported = false;  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  std::size_t vmm_granularity_min_bytes = 0;
  std::size_t vmm_granularity_recommended_bytes = 0;
};

// All visible GPUs, or why there are none (no driver, no device, ...).
Result<std::vector<GpuInfo>> query_gpus();

// The CUDA driver's version as "13.0", or the reason it is unavailable.
Result<std::string> driver_version();

struct BackendChoice {
  Device device = Device::cpu;
  std::string reason;  // one line: why this backend
};

// CUDA when a GPU with compute capability >= 8.0 and VMM support is found,
// the CPU otherwise. `requested` is "auto", "cuda" or "cpu"; asking for cuda
// on a machine without one is an error, not a silent fallback.
Result<BackendChoice> choose_backend(std::string_view requested);

}  // namespace vpod::cuda
