// MaskWorkers (mask_workers.h): a FIFO of GrammarStates and the threads that
// run their jobs.
#include "grammar/mask_workers.h"

#include <algorithm>
#include <exception>

#include "common/check.h"

namespace vpod::grammar {

namespace {
constexpr int kMaxThreads = 8;
}

int MaskWorkers::default_threads() {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hw / 2, 1, kMaxThreads);
}

MaskWorkers::MaskWorkers(int num_threads) {
  queue_.reserve(256);
  for (int i = 0; i < std::max(num_threads, 1); ++i)
    threads_.emplace_back([this] { worker_loop(); });
}

MaskWorkers::~MaskWorkers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void MaskWorkers::submit(GrammarState& state, std::span<const std::int32_t> outputs) {
  VPOD_CHECK(!state.busy.load(std::memory_order_acquire));
  VPOD_CHECK(static_cast<int>(outputs.size()) >= state.accepted);
  state.pending.assign(outputs.begin() + state.accepted, outputs.end());
  state.busy.store(true, std::memory_order_release);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(state.shared_from_this());
  }
  work_.notify_one();
}

void MaskWorkers::wait_for_completion(std::uint64_t seen, std::chrono::microseconds timeout) {
  std::unique_lock lock(mutex_);
  finished_.wait_for(lock, timeout, [&] { return completions() != seen; });
}

// Accept, then fill. A refusal (or an exception from xgrammar, or a matcher
// that has ended) leaves an all-ones mask and `rejected`: the row still
// samples and the engine fails only that request.
void MaskWorkers::run(GrammarState& s) {
  try {
    for (const std::int32_t token : s.pending) {
      if (s.rejected) break;
      if (!s.matcher->accept(token)) s.rejected = true;
    }
    if (!s.rejected && s.matcher->terminated()) s.rejected = true;
    if (!s.rejected) s.matcher->fill_bitmask(s.mask);
  } catch (const std::exception&) {
    s.rejected = true;
  }
  if (s.rejected) std::fill(s.mask.begin(), s.mask.end(), ~std::uint32_t{0});
  s.accepted += static_cast<int>(s.pending.size());
  s.mask_for = s.accepted;
  s.pending.clear();
}

void MaskWorkers::worker_loop() {
  for (;;) {
    std::shared_ptr<GrammarState> job;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return stopping_ || head_ < queue_.size(); });
      if (head_ == queue_.size()) return;  // stopping, nothing queued
      job = std::move(queue_[head_++]);
      if (head_ == queue_.size()) {
        queue_.clear();
        head_ = 0;
      }
    }
    run(*job);
    job->busy.store(false, std::memory_order_release);
    {
      std::lock_guard lock(mutex_);
      completions_.fetch_add(1, std::memory_order_acq_rel);
    }
    finished_.notify_all();
    job.reset();  // may free a request's grammar whose request has ended
  }
}

}  // namespace vpod::grammar
