// The cudaMalloc owner (device_buffer.h): allocation, release, host copies and fill.

#include "cuda/device_buffer.h"

#include <fmt/format.h>

#include <utility>

#include "common/cuda_check.h"

namespace vpod::cuda {

Result<DeviceBuffer> DeviceBuffer::allocate(std::size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* data = nullptr;
  const cudaError_t err = cudaMalloc(&data, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return resource_exhausted(
        fmt::format("cudaMalloc of {} bytes failed: {}", bytes, cuda_error_message(err)));
  }
  return DeviceBuffer(data, bytes);
}
DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) VPOD_CUDA_CHECK(cudaFree(data_));
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) VPOD_CUDA_CHECK(cudaFree(data_));
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
void DeviceBuffer::copy_from_host(const void* src, std::size_t bytes, std::size_t offset) {
  VPOD_CHECK_MSG(offset + bytes <= bytes_, "copy_from_host past the end of the buffer");
  VPOD_CUDA_CHECK(
      cudaMemcpy(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the DMA lands, and the
  // legacy stream it used does not order work on non-blocking streams: wait,
  // so the data is on the device for any stream once this returns.
  VPOD_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}
void DeviceBuffer::copy_to_host(void* dst, std::size_t bytes, std::size_t offset) const {
  VPOD_CHECK_MSG(offset + bytes <= bytes_, "copy_to_host past the end of the buffer");
  VPOD_CUDA_CHECK(
      cudaMemcpy(dst, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost));
}
void DeviceBuffer::fill_bytes(int value, cudaStream_t stream) {
  VPOD_CUDA_CHECK(cudaMemsetAsync(data_, value, bytes_, stream));
}

}  // namespace vpod::cuda
