// One memory budget shared by every chat-template render in the process, so
// that concurrent hostile renders cannot add up their per-render limits
// (RenderLimits::max_allocated_bytes each) into more than the server can
// hold. Renders reserve from it in grains as they charge bytes and give
// everything back when they end.
#pragma once

#include <atomic>
#include <cstddef>

namespace vpod::tokenizer::jinja {

class RenderBudget {
 public:
  explicit RenderBudget(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // Takes `bytes` if they fit; false (and nothing taken) otherwise.
  bool try_reserve(std::size_t bytes);
  void release(std::size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  std::size_t capacity() const { return capacity_; }
  std::size_t in_use() const { return used_.load(std::memory_order_relaxed); }

 private:
  const std::size_t capacity_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace vpod::tokenizer::jinja
