// Move-only owner of a cudaEvent_t. Events order host work after GPU work
// (e.g. the KV cache waits on one before unmapping pages a kernel may read)
// and time kernels.
#pragma once

#include <cuda_runtime_api.h>

#include "common/status.h"

namespace vpod::cuda {

class Event {
 public:
  enum class Timing { disabled, enabled };

  Event() = default;  // empty: owns nothing
  static Result<Event> create(Timing timing = Timing::disabled);
  ~Event();
  Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  explicit operator bool() const { return event_ != nullptr; }
  void record(cudaStream_t stream) const;
  void synchronize() const;
  // True when all work captured by the last record() has completed.
  bool query() const;
  // Milliseconds between two timing-enabled events, both completed.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  explicit Event(cudaEvent_t event) : event_(event) {}
  cudaEvent_t event_ = nullptr;
};

}  // namespace vpod::cuda
