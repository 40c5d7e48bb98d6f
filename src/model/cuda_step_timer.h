// Per-op GPU timing of the CUDA backend (benchmarks' step-time breakdown):
// an event pair around each op while enabled, summed by op category when
// taken. Adds a little overhead; off by default, and step graphs are not
// used while it is on (their ops could not be timed one by one).
#pragma once

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "cuda/event.h"
#include "model/backend.h"

namespace vpod::model {

enum class OpCategory { gemm, attention, other };

class StepTimer {
 public:
  // Records the begin event of one op on construction, the end event on
  // destruction (when timing is on and fewer than kMaxTimedOps ops are held).
  class Scope {
   public:
    Scope(StepTimer& timer, OpCategory category);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepTimer& timer_;
    int index_ = -1;
  };

  explicit StepTimer(cudaStream_t stream) : stream_(stream) {}
  bool enabled() const { return enabled_; }
  // Turns timing on or off and drops the ops timed so far.
  void set_enabled(bool enabled);
  // Synchronizes the stream, returns the times since the last call, resets.
  OpTimes take();

 private:
  static constexpr int kMaxTimedOps = 4096;
  cudaStream_t stream_;
  bool enabled_ = false;
  std::vector<cuda::Event> events_;                // 2 per op: begin, end
  std::vector<std::pair<OpCategory, int>> timed_;  // (category, event pair index)
};

}  // namespace vpod::model
