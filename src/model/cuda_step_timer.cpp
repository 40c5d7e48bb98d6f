// Per-op GPU timing of the CUDA backend (see cuda_step_timer.h).
#include "model/cuda_step_timer.h"

#include "common/check.h"
#include "common/cuda_check.h"

namespace vpod::model {

StepTimer::Scope::Scope(StepTimer& timer, OpCategory category) : timer_(timer) {
  if (!timer_.enabled_ || timer_.timed_.size() >= kMaxTimedOps) return;
  index_ = static_cast<int>(timer_.timed_.size());
  timer_.timed_.emplace_back(category, index_);
  timer_.events_[2 * index_].record(timer_.stream_);
}

StepTimer::Scope::~Scope() {
  if (index_ >= 0) timer_.events_[2 * index_ + 1].record(timer_.stream_);
}

void StepTimer::set_enabled(bool enabled) {
  enabled_ = enabled;
  if (enabled && events_.empty()) {
    for (int i = 0; i < kMaxTimedOps * 2; ++i) {
      auto e = cuda::Event::create(cuda::Event::Timing::enabled);
      VPOD_CHECK(e.ok());
      events_.push_back(std::move(e).value());
    }
  }
  timed_.clear();
}

OpTimes StepTimer::take() {
  OpTimes t;
  VPOD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (const auto& [category, index] : timed_) {
    const double ms = cuda::Event::elapsed_ms(events_[2 * index], events_[2 * index + 1]);
    (category == OpCategory::gemm        ? t.gemm_ms
     : category == OpCategory::attention ? t.attention_ms
                                         : t.other_ms) += ms;
    ++t.num_ops;
  }
  timed_.clear();
  return t;
}

}  // namespace vpod::model
