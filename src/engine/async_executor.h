// A ModelExecutor that runs another one's forward on its own worker thread,
// so launch() returns at once and the engine thread does the previous step's
// output work (detokenization, stop strings, streaming) while the step runs.
//
// This is how the pipelined loop overlaps host and device work without a
// split device API: the worker issues the step (metadata upload, planning,
// kernel launches or a graph replay) and blocks in the sampler's
// synchronization; the engine thread blocks only in wait(). On the CPU
// backend the forward itself runs on the worker, concurrently with the
// engine's output work.
//
// Hand-off: launch() publishes the step and wakes the worker; wait() spins
// for `spin` (cheap when the step is nearly done) and then sleeps on a
// condition variable. The worker, after a step, spins for `spin` waiting for
// the next one (the engine's exposed host work is usually shorter) before
// sleeping. Spinning is off by default on small machines.
//
// The worker touches the inner executor only between launch() and the
// matching wait(); forward() runs the inner executor on the caller's thread
// (for a synchronous loop). One step in flight at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/model_executor.h"

namespace vpod::engine {

class AsyncExecutor final : public ModelExecutor {
 public:
  // spin < 0: 200 us on machines with >= 8 hardware threads, 0 otherwise.
  explicit AsyncExecutor(ModelExecutor& inner,
                         std::chrono::microseconds spin = std::chrono::microseconds(-1));
  ~AsyncExecutor() override;  // joins the worker (a step in flight completes first)
  AsyncExecutor(const AsyncExecutor&) = delete;
  AsyncExecutor& operator=(const AsyncExecutor&) = delete;

  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out, const PromptScores& scores) override;
  Status launch(const HybridBatch& batch, std::span<const SampleSpec> samples,
                std::span<SampledToken> out, const PromptScores& scores) override;
  Status wait() override;

 private:
  enum State : int { kIdle, kQueued, kDone, kStop };
  void run();
  // Spins until done(state_) or the spin time is over; true if done.
  template <typename Done>
  bool spin_until(Done done) const;

  ModelExecutor& inner_;
  std::chrono::nanoseconds spin_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<int> state_{kIdle};
  // The step in flight (written by launch before kQueued is published).
  const HybridBatch* batch_ = nullptr;
  std::span<const SampleSpec> samples_;
  std::span<SampledToken> out_;
  PromptScores scores_;
  Status result_;  // written by the worker before kDone
  std::thread thread_;
};

}  // namespace vpod::engine
