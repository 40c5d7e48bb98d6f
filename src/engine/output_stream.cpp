// RequestStream (output_stream.h): the queue of deltas between the engine
// thread that pushes them and the server thread that pops them.
#include "engine/output_stream.h"

#include <algorithm>
#include <utility>

namespace vpod::engine {

namespace {
// Text is reserved per request up to this many bytes; longer outputs grow the
// string geometrically (amortized, never per step).
constexpr std::size_t kMaxReservedTextBytes = 4096;
constexpr std::size_t kReservedBytesPerToken = 8;
}  // namespace

void RequestOutput::clear() {
  token_ids.clear();
  text.clear();
  logprobs.clear();
  prompt_logprobs.clear();
  finished = false;
  finish_reason = FinishReason::none;
  stop_string.clear();
  stop_token.reset();
  error.clear();
}

void RequestOutput::merge(const RequestOutput& next) {
  id = next.id;
  token_ids.insert(token_ids.end(), next.token_ids.begin(), next.token_ids.end());
  text += next.text;
  logprobs.insert(logprobs.end(), next.logprobs.begin(), next.logprobs.end());
  prompt_logprobs.insert(prompt_logprobs.end(), next.prompt_logprobs.begin(),
                         next.prompt_logprobs.end());
  if (next.finished) {
    finished = true;
    finish_reason = next.finish_reason;
    stop_string = next.stop_string;
    stop_token = next.stop_token;
    error = next.error;
  }
  num_prompt_tokens = next.num_prompt_tokens;
  num_cached_tokens = next.num_cached_tokens;
  num_generated_tokens = next.num_generated_tokens;
}

RequestStream::RequestStream(RequestId id, int reserve_tokens, bool with_logprobs,
                             int reserve_prompt_logprobs, std::function<void()> on_output)
    : id_(id),
      reserve_tokens_(std::max(reserve_tokens, 1)),
      with_logprobs_(with_logprobs),
      on_output_(std::move(on_output)) {
  pending_.id = id;
  pending_.token_ids.reserve(reserve_tokens_);
  pending_.text.reserve(std::min(kMaxReservedTextBytes, reserve_tokens_ * kReservedBytesPerToken));
  if (with_logprobs_) pending_.logprobs.reserve(reserve_tokens_);
  pending_.prompt_logprobs.reserve(static_cast<std::size_t>(std::max(reserve_prompt_logprobs, 0)));
}

void RequestStream::push(const RequestOutput& delta) {
  {
    std::lock_guard lock(mutex_);
    pending_.merge(delta);
    has_pending_ = true;
    if (delta.finished) finished_ = true;
  }
  ready_.notify_all();
  if (on_output_) on_output_();
}

bool RequestStream::pop(RequestOutput& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return has_pending_; })) return false;
  std::swap(out, pending_);
  pending_.clear();
  pending_.id = id_;
  has_pending_ = false;
  // The consumer's old buffers are the new pending ones: give them the
  // capacity the engine expects (allocates, if at all, on this thread).
  pending_.token_ids.reserve(reserve_tokens_);
  pending_.text.reserve(std::min(kMaxReservedTextBytes, reserve_tokens_ * kReservedBytesPerToken));
  if (with_logprobs_) pending_.logprobs.reserve(reserve_tokens_);
  return true;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

}  // namespace vpod::engine
