// The cudaStream_t owner (stream.h): creation, release and synchronization.

#include "cuda/stream.h"

#include <utility>

#include "common/cuda_check.h"

namespace vpod::cuda {

Result<Stream> Stream::create() {
  cudaStream_t stream = nullptr;
  VPOD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                            StatusCode::unavailable);
  return Stream(stream);
}
Stream::~Stream() {
  if (stream_ != nullptr) VPOD_CUDA_CHECK(cudaStreamDestroy(stream_));
}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) VPOD_CUDA_CHECK(cudaStreamDestroy(stream_));
    stream_ = other.release();
  }
  return *this;
}
void Stream::synchronize() const { VPOD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace vpod::cuda
