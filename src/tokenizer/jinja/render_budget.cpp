// The process-wide render memory budget (render_budget.h): the lock-free
// reservation against its capacity (the rest is inline in the header).

#include "tokenizer/jinja/render_budget.h"

namespace vpod::tokenizer::jinja {

bool RenderBudget::try_reserve(std::size_t bytes) {
  std::size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

}  // namespace vpod::tokenizer::jinja
