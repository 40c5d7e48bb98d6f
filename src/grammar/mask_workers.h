// The threads that advance constrained requests' matchers and fill their
// next-token bitmasks, off the engine thread and under the GPU forward. A
// job takes one GrammarState (grammar_state.h): it accepts the outputs the
// matcher has not seen yet, then fills the mask. The model runner submits a
// step's jobs after it has issued the forward, then waits for them; on the
// GPU it may stop waiting for a decode row once the forward is done and
// leave that row's job running (the row sits the step out; docs/
// structured_output.md). So the caller never runs a job itself, and a job
// may outlive the step that started it.
//
// Threads are made once, for the process's life; a step allocates nothing
// (the queue keeps its capacity).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "grammar/grammar_state.h"

namespace vpod::grammar {

class MaskWorkers {
 public:
  // `num_threads` >= 1 worker threads.
  explicit MaskWorkers(int num_threads);
  ~MaskWorkers();  // finishes the queued jobs, then joins
  MaskWorkers(const MaskWorkers&) = delete;
  MaskWorkers& operator=(const MaskWorkers&) = delete;

  // Starts a job on `state` (not busy; owned by a shared_ptr): accept
  // outputs[state.accepted, outputs.size()), then fill the mask, so that
  // mask_for == outputs.size(). `outputs` is copied.
  void submit(GrammarState& state, std::span<const std::int32_t> outputs);

  // Jobs finished so far; with wait_for_completion, a wait that misses none.
  std::uint64_t completions() const { return completions_.load(std::memory_order_acquire); }
  // Returns once completions() != seen, or after `timeout`.
  void wait_for_completion(std::uint64_t seen, std::chrono::microseconds timeout);

  // A default for this host: up to 8 threads, half the hardware threads.
  static int default_threads();

 private:
  void worker_loop();
  static void run(GrammarState& s);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable work_;      // a job was queued, or stopping_
  std::condition_variable finished_;  // a job finished
  // FIFO: queue_[head_, size()); cleared (capacity kept) when drained.
  std::vector<std::shared_ptr<GrammarState>> queue_;
  std::size_t head_ = 0;
  bool stopping_ = false;
  std::atomic<std::uint64_t> completions_{0};
};

}  // namespace vpod::grammar
