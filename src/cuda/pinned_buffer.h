// Owner of page-locked host memory, for the per-step copies that must be
// asynchronous (metadata up, sampled tokens down). It grows, rarely, to the
// largest request and never shrinks; contents are not kept across growth.
#pragma once

#include <cstddef>
#include <utility>

#include "common/status.h"

namespace vpod::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // Moves hand the allocation over (plans that own one are movable).
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;

  // Makes room for at least `bytes`; out of pinned memory is resource_exhausted.
  Status reserve(std::size_t bytes);
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace vpod::cuda
