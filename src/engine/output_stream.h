// What a request streams back to its client: deltas of token ids, final text,
// logprobs and, at the end, a finish reason. The engine thread produces them;
// a server thread consumes them.
//
// Backpressure-free: the engine never waits for a consumer. Deltas that pile
// up while the consumer is busy are merged, so one pop returns everything
// produced since the previous pop. The pending buffers are reserved up front
// and swapped with the consumer's on pop, so steady-state streaming does not
// allocate on the engine thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_executor.h"
#include "engine/request.h"

namespace vpod::engine {

struct RequestOutput {
  RequestId id = 0;
  std::vector<std::int32_t> token_ids;  // new tokens since the previous delta
  // New final text. Text that could still be the start of a stop string is
  // held back until it is certain it is not; a stop string (and what follows
  // it) is cut, kept only with include_stop_str_in_output. Because of the
  // hold-back, text and token ids of one delta need not line up.
  std::string text;
  std::vector<SampledToken> logprobs;  // parallel to token_ids when logprobs were requested
  // Prompt logprobs, once, in the first delta (with the first token, or the
  // final delta of a max_tokens 0 request): entry i is prompt token i+1's.
  std::vector<SampledToken> prompt_logprobs;

  bool finished = false;
  FinishReason finish_reason = FinishReason::none;
  std::string stop_string;                 // the stop string that ended it, if any
  std::optional<std::int32_t> stop_token;  // the stop/EOS token that ended it, if any
  std::string error;                       // why, when finish_reason == error

  // Running totals (usage), valid in every delta. num_cached_tokens: the
  // prompt tokens the prefix cache held at the request's first admission
  // (OpenAI's usage.prompt_tokens_details.cached_tokens).
  int num_prompt_tokens = 0;
  int num_generated_tokens = 0;
  int num_cached_tokens = 0;

  void clear();
  // Appends `next` (a later delta of the same request) to this one.
  void merge(const RequestOutput& next);
};

class RequestStream {
 public:
  // `on_output` (optional) runs on the engine thread after each push, e.g. to
  // wake an event loop. It must be quick and must not call back into the engine.
  // `reserve_prompt_logprobs`: the prompt logprobs the first delta carries
  // (reserved so that the engine's push does not allocate).
  RequestStream(RequestId id, int reserve_tokens, bool with_logprobs,
                int reserve_prompt_logprobs = 0, std::function<void()> on_output = {});

  RequestId id() const { return id_; }

  // --- engine thread ---
  void push(const RequestOutput& delta);

  // --- consumer thread ---
  // Moves everything pending into `out` (replacing its contents) and returns
  // true, or returns false when nothing arrived before `timeout`. Reuse `out`
  // between calls: its buffers become the next pending buffers.
  bool pop(RequestOutput& out, std::chrono::milliseconds timeout);
  bool try_pop(RequestOutput& out) { return pop(out, std::chrono::milliseconds(0)); }
  // True once the final delta has been pushed (it may still be pending).
  bool finished() const;

 private:
  const RequestId id_;
  const int reserve_tokens_;
  const bool with_logprobs_;
  const std::function<void()> on_output_;

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  RequestOutput pending_;  // guarded by mutex_
  bool has_pending_ = false;
  bool finished_ = false;
};

}  // namespace vpod::engine
