// The page-locked host buffer (pinned_buffer.h): growth and release.

#include "cuda/pinned_buffer.h"

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"

namespace vpod::cuda {

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Status PinnedBuffer::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return {};
  if (data_ != nullptr) cudaFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
  VPOD_CUDA_RETURN_IF_ERROR(cudaMallocHost(&data_, bytes), StatusCode::resource_exhausted);
  bytes_ = bytes;
  return {};
}

}  // namespace vpod::cuda
