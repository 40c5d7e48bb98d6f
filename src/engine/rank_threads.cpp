// RankThreads (rank_threads.h): a generation counter hands each run_all's
// task to the worker threads; the caller runs rank 0 and waits for the rest.
#include "engine/rank_threads.h"

#include "common/check.h"

namespace vpod::engine {

RankThreads::RankThreads(int size, std::function<void(int)> thread_init)
    : size_(size), results_(static_cast<std::size_t>(size)) {
  VPOD_CHECK(size >= 1);
  for (int r = 1; r < size; ++r) {
    threads_.emplace_back([this, r, thread_init] { loop(r, thread_init); });
  }
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankThreads::loop(int rank, const std::function<void(int)>& thread_init) {
  if (thread_init) thread_init(rank);
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<Status(int)>* task = nullptr;
    {
      std::unique_lock lock(mutex_);
      work_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
    }
    Status s = (*task)(rank);
    {
      std::lock_guard lock(mutex_);
      results_[static_cast<std::size_t>(rank)] = std::move(s);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

Status RankThreads::run_all(const std::function<Status(int)>& task) {
  {
    std::lock_guard lock(mutex_);
    VPOD_CHECK_MSG(pending_ == 0, "RankThreads::run_all is not reentrant");
    task_ = &task;
    pending_ = size_ - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  results_[0] = task(0);
  {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }
  for (const Status& s : results_) {
    if (!s.ok()) return s;
  }
  return {};
}

}  // namespace vpod::engine
