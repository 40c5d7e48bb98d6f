// Where one engine step's time goes: the step marks its phase boundaries on a
// StepTimer, which adds each phase's duration to the StepTimes fields it
// belongs to (see metrics.h). Keeps the timing out of Engine::step's logic.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "engine/metrics.h"
#include "engine/request.h"

namespace vpod::engine {

// The engine's clock: steady_clock in production, a virtual clock in tests
// (EngineConfig::clock).
using ClockFn = std::function<Clock::time_point()>;

enum class StepPhase : std::uint8_t {
  wait,             // blocked in the executor's wait()            -> forward, wait
  commit,           // commit of the collected step, token stops   -> commit, host exposed
  schedule,         // releases, scheduler.schedule                -> schedule, host exposed
  prepare,          // kv.prepare                                  -> prepare, host exposed
  launch,           // the executor's launch()                     -> forward, launch
  hidden_outputs,   // output work while a step is in flight       -> commit, host hidden
  exposed_outputs,  // output work with nothing in flight          -> commit, host exposed
};

class StepTimer {
 public:
  explicit StepTimer(const ClockFn& clock) : clock_(clock) {}
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  Clock::time_point now() const { return clock_(); }
  // Ends the running phase (if any) and starts `phase`; returns the boundary.
  Clock::time_point begin(StepPhase phase) {
    const Clock::time_point t = end();
    phase_ = phase;
    return t;
  }
  // Ends the running phase (if any); returns the boundary.
  Clock::time_point end() {
    const Clock::time_point t = now();
    if (phase_) add(*phase_, std::chrono::duration<double>(t - start_).count());
    phase_.reset();
    start_ = t;
    return t;
  }
  const StepTimes& times() const { return times_; }

 private:
  void add(StepPhase phase, double s) {
    switch (phase) {
      case StepPhase::wait:
        times_.wait_s += s;
        times_.forward_s += s;
        break;
      case StepPhase::commit:
        times_.commit_s += s;
        times_.host_exposed_s += s;
        break;
      case StepPhase::schedule:
        times_.schedule_s += s;
        times_.host_exposed_s += s;
        break;
      case StepPhase::prepare:
        times_.prepare_s += s;
        times_.host_exposed_s += s;
        break;
      case StepPhase::launch:
        times_.launch_s += s;
        times_.forward_s += s;
        break;
      case StepPhase::hidden_outputs:
        times_.commit_s += s;
        times_.host_hidden_s += s;
        break;
      case StepPhase::exposed_outputs:
        times_.commit_s += s;
        times_.host_exposed_s += s;
        break;
    }
  }

  const ClockFn& clock_;
  std::optional<StepPhase> phase_;
  Clock::time_point start_;
  StepTimes times_;
};

}  // namespace vpod::engine
