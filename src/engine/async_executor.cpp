// AsyncExecutor (async_executor.h): the worker thread that runs the wrapped
// executor's forward, and the launch/wait handshake with the engine thread.
#include "engine/async_executor.h"

#include "common/check.h"

namespace vpod::engine {

namespace {
std::chrono::nanoseconds default_spin(std::chrono::microseconds spin) {
  if (spin.count() >= 0) return spin;
  return std::thread::hardware_concurrency() >= 8 ? std::chrono::microseconds(200)
                                                  : std::chrono::microseconds(0);
}
}  // namespace

AsyncExecutor::AsyncExecutor(ModelExecutor& inner, std::chrono::microseconds spin)
    : inner_(inner), spin_(default_spin(spin)) {
  thread_ = std::thread([this] { run(); });
}

AsyncExecutor::~AsyncExecutor() {
  if (state_.load(std::memory_order_acquire) == kQueued) (void)wait();
  {
    std::lock_guard lock(mutex_);
    state_.store(kStop, std::memory_order_release);
  }
  cv_.notify_all();
  thread_.join();
}

Status AsyncExecutor::forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                              std::span<SampledToken> out, const PromptScores& scores) {
  VPOD_CHECK_MSG(state_.load(std::memory_order_acquire) == kIdle,
                 "AsyncExecutor::forward with a step in flight");
  return inner_.forward(batch, samples, out, scores);
}

Status AsyncExecutor::launch(const HybridBatch& batch, std::span<const SampleSpec> samples,
                             std::span<SampledToken> out, const PromptScores& scores) {
  VPOD_CHECK_MSG(state_.load(std::memory_order_acquire) == kIdle,
                 "AsyncExecutor::launch with a step in flight");
  batch_ = &batch;
  samples_ = samples;
  out_ = out;
  scores_ = scores;
  {
    std::lock_guard lock(mutex_);
    state_.store(kQueued, std::memory_order_release);
  }
  cv_.notify_all();
  return {};
}

Status AsyncExecutor::wait() {
  const int state = state_.load(std::memory_order_acquire);
  if (state == kIdle) return {};  // nothing launched
  if (!spin_until([](int s) { return s != kQueued; })) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return state_.load(std::memory_order_acquire) != kQueued; });
  }
  VPOD_CHECK(state_.load(std::memory_order_acquire) == kDone);
  Status result = std::move(result_);
  result_ = {};
  state_.store(kIdle, std::memory_order_release);
  return result;
}

template <typename Done>
bool AsyncExecutor::spin_until(Done done) const {
  if (spin_.count() == 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + spin_;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done(state_.load(std::memory_order_acquire))) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

void AsyncExecutor::run() {
  for (;;) {
    // After a step the engine usually launches the next one within its
    // exposed host time (collect, schedule, kv.prepare): spin first, then sleep.
    if (!spin_until([](int s) { return s == kQueued || s == kStop; })) {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] {
        const int s = state_.load(std::memory_order_acquire);
        return s == kQueued || s == kStop;
      });
    }
    const int state = state_.load(std::memory_order_acquire);
    if (state == kStop) return;
    if (state != kQueued) continue;
    result_ = inner_.forward(*batch_, samples_, out_, scores_);
    {
      std::lock_guard lock(mutex_);
      state_.store(kDone, std::memory_order_release);
    }
    cv_.notify_all();
  }
}

}  // namespace vpod::engine
