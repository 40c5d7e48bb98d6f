// One thread per tensor-parallel rank (docs/model.md, "Tensor parallelism"):
// rank 0's work runs on the calling thread (the engine's model thread) and
// ranks 1..N-1 on threads of their own, which live as long as this object.
// On CUDA each rank thread makes its GPU current once (`thread_init`), so
// everything a rank does - its backend, NCCL communicator, weights, KV cache
// and every step - happens on the thread that owns its device.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"

namespace vpod::engine {

class RankThreads {
 public:
  // Starts size - 1 threads; each first runs thread_init(rank) (may be null).
  explicit RankThreads(int size, std::function<void(int rank)> thread_init = nullptr);
  ~RankThreads();  // joins the threads (no task may be running)
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return size_; }
  // Runs task(r) for every rank at once (rank 0 on the caller) and returns
  // when all are done: the first failure in rank order, or ok. A task that
  // may block on the others (a collective) must make them fail rather than
  // wait when it fails itself (Communicator::abort).
  Status run_all(const std::function<Status(int rank)>& task);

 private:
  void loop(int rank, const std::function<void(int)>& thread_init);

  const int size_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<Status(int)>* task_ = nullptr;  // the current run_all's
  std::uint64_t generation_ = 0;                      // bumped per run_all
  int pending_ = 0;                                   // worker ranks still running
  std::vector<Status> results_;                       // [size]
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace vpod::engine
