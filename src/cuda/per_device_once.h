// Host-side setup a kernel needs once on each CUDA device, such as its opt-in
// to more than 48 KiB of dynamic shared memory. cudaFuncSetAttribute applies to
// the current device's context only, and tensor-parallel ranks are threads of
// one process on different devices, so a process-wide `static` flag would leave
// every device but the first unprepared (its launches then fail).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "common/cuda_check.h"
#include "common/status.h"

namespace vpod::cuda {

class PerDeviceOnce {
 public:
  // Ordinals at or above this are prepared on every call (never cached).
  static constexpr int kMaxCachedDevices = 64;

  // Runs `setup` (returning Status) for `device` unless it already succeeded
  // there. A failure is returned and not remembered: the next call retries.
  // Threads on the same device may both run it the first time; the setups
  // this serves (function attributes) are idempotent.
  template <typename Setup>
  Status run(int device, Setup&& setup) {
    if (device < 0 || device >= kMaxCachedDevices) return std::forward<Setup>(setup)();
    const std::uint64_t bit = std::uint64_t{1} << device;
    if ((done_.load(std::memory_order_acquire) & bit) != 0) return Status();
    Status status = std::forward<Setup>(setup)();
    if (status.ok()) done_.fetch_or(bit, std::memory_order_acq_rel);
    return status;
  }

  bool done(int device) const {
    return device >= 0 && device < kMaxCachedDevices &&
           (done_.load(std::memory_order_acquire) & (std::uint64_t{1} << device)) != 0;
  }

 private:
  std::atomic<std::uint64_t> done_{0};
};

// Runs `Prepare` once on each device it is called on, the current one this
// time: one PerDeviceOnce per function.
template <Status (*Prepare)()>
Status prepare_on_current_device() {
  static PerDeviceOnce once;
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_status(err, "cudaGetDevice");
  }
  return once.run(device, Prepare);
}

}  // namespace vpod::cuda
