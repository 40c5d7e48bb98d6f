// Move-only owner of a cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include "common/status.h"

namespace vpod::cuda {

class Stream {
 public:
  Stream() = default;  // empty: owns nothing
  // A non-blocking stream (does not synchronize with the legacy default stream).
  static Result<Stream> create();
  ~Stream();
  Stream(Stream&& other) noexcept : stream_(other.release()) {}
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  explicit operator bool() const { return stream_ != nullptr; }
  void synchronize() const;
  cudaStream_t release() {
    cudaStream_t s = stream_;
    stream_ = nullptr;
    return s;
  }

 private:
  explicit Stream(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream_ = nullptr;
};

}  // namespace vpod::cuda
