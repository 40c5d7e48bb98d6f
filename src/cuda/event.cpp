// The cudaEvent_t owner (event.h): creation, record, synchronize, query and elapsed time.

#include "cuda/event.h"

#include <utility>

#include "common/cuda_check.h"

namespace vpod::cuda {

Result<Event> Event::create(Timing timing) {
  cudaEvent_t event = nullptr;
  const unsigned flags = timing == Timing::enabled ? cudaEventDefault : cudaEventDisableTiming;
  VPOD_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags), StatusCode::unavailable);
  return Event(event);
}
Event::~Event() {
  if (event_ != nullptr) VPOD_CUDA_CHECK(cudaEventDestroy(event_));
}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) VPOD_CUDA_CHECK(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}
void Event::record(cudaStream_t stream) const { VPOD_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::synchronize() const { VPOD_CUDA_CHECK(cudaEventSynchronize(event_)); }
bool Event::query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  VPOD_CUDA_CHECK(err);
  return true;
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  VPOD_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace vpod::cuda
