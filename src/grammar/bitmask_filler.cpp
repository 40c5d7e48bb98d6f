// BitmaskFiller (bitmask_filler.h): workers take rows off a shared counter.
#include "grammar/bitmask_filler.h"

#include <algorithm>
#include <exception>

namespace vpod::grammar {

namespace {
constexpr int kMaxFillThreads = 8;
}

int BitmaskFiller::default_threads() {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hw / 2, 1, kMaxFillThreads);
}

BitmaskFiller::BitmaskFiller(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

BitmaskFiller::~BitmaskFiller() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void BitmaskFiller::run_jobs() {
  for (;;) {
    const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= matchers_.size()) return;
    try {
      matchers_[i]->fill_bitmask(std::span(rows_[i], static_cast<std::size_t>(words_)));
    } catch (const std::exception&) {
      failed_.store(true, std::memory_order_relaxed);
    }
  }
}

void BitmaskFiller::worker_loop() {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_jobs();
    {
      std::lock_guard lock(mutex_);
      --active_workers_;
    }
    done_.notify_one();
  }
}

Status BitmaskFiller::fill(std::span<Matcher* const> matchers, std::span<std::uint32_t* const> rows,
                           int words) {
  if (matchers.size() != rows.size()) return invalid_argument("one bitmask row per matcher");
  if (matchers.empty()) return {};
  matchers_ = matchers;
  rows_ = rows;
  words_ = words;
  next_.store(0, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  // One row is not worth waking anyone.
  const bool parallel = !workers_.empty() && matchers.size() > 1;
  if (parallel) {
    {
      std::lock_guard lock(mutex_);
      active_workers_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
  }
  run_jobs();
  if (parallel) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return active_workers_ == 0; });
  }
  if (failed_.load(std::memory_order_relaxed))
    return internal_error("filling a grammar's token bitmask failed");
  return {};
}

}  // namespace vpod::grammar
