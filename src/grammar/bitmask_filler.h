// Fills the next-token bitmasks of a step's constrained requests in
// parallel, on a small pool of threads kept for the process's life (no
// thread or allocation per step). The model runner calls it after it has
// issued the step's forward, so on the GPU the mask work overlaps the
// forward (docs/structured_output.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/status.h"
#include "grammar/matcher.h"

namespace vpod::grammar {

class BitmaskFiller {
 public:
  // `num_threads` threads fill, the caller included (<= 1: the caller alone).
  explicit BitmaskFiller(int num_threads);
  ~BitmaskFiller();
  BitmaskFiller(const BitmaskFiller&) = delete;
  BitmaskFiller& operator=(const BitmaskFiller&) = delete;

  // matchers[i] fills rows[i] (`words` words each). Returns once all are
  // written; internal_error if xgrammar failed on one.
  Status fill(std::span<Matcher* const> matchers, std::span<std::uint32_t* const> rows, int words);

  // A default for this host: up to 8 threads, half the hardware threads.
  static int default_threads();

 private:
  void worker_loop();
  void run_jobs();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::uint64_t generation_ = 0;  // a new fill() (under mutex_)
  bool stopping_ = false;
  int active_workers_ = 0;  // workers still in this fill's jobs (under mutex_)

  // The current fill (set before generation_ is bumped).
  std::span<Matcher* const> matchers_;
  std::span<std::uint32_t* const> rows_;
  int words_ = 0;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> failed_{false};
};

}  // namespace vpod::grammar
