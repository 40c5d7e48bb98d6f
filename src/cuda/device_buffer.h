// Move-only owner of a cudaMalloc'd block. Buffers are sized once at start-up;
// nothing on the step path allocates.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/status.h"

namespace vpod::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;  // empty: owns nothing
  // Out of device memory is a resource_exhausted Status naming the size.
  static Result<DeviceBuffer> allocate(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }

  // Synchronous copies: the data has arrived (for every stream) when they
  // return. Sizes are checked against the buffer. Not for the step path.
  void copy_from_host(const void* src, std::size_t bytes, std::size_t offset = 0);
  void copy_to_host(void* dst, std::size_t bytes, std::size_t offset = 0) const;
  void fill_bytes(int value, cudaStream_t stream = nullptr);

 private:
  DeviceBuffer(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace vpod::cuda
