// One HTTP request's sequences in the engine: n choices for each prompt,
// submitted together, drained together, aborted together.
//
// Threading: owned and used by one connection (its strand); the engine thread
// only calls the `notify` given to start(), and never after the call is gone:
// the notifier is shared with the engine's wake callbacks and cleared (under
// its mutex) by the destructor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "server/api_error.h"
#include "server/backend.h"

namespace vpod::server {

// The seed of choice `index` of a request seeded with `seed`: choice 0 keeps
// the seed (so n=1 and the first of n=2 agree), the others get well-mixed
// distinct seeds.
std::uint64_t choice_seed(std::uint64_t seed, int index);

class GenerationCall {
 public:
  // Submits every spec. `notify` runs on the engine thread whenever a
  // sequence has something new (possibly before start() returns); it must be
  // quick and must not call into the backend. On a failure, what was
  // submitted is aborted and the backend's status comes back as an error
  // (400, or 503 when the engine is out of room).
  static ApiResult<std::unique_ptr<GenerationCall>> start(ServingBackend& backend,
                                                          std::vector<engine::RequestSpec> specs,
                                                          std::function<void()> notify);
  // Aborts the sequences that have not finished.
  ~GenerationCall();
  GenerationCall(const GenerationCall&) = delete;
  GenerationCall& operator=(const GenerationCall&) = delete;

  int size() const { return static_cast<int>(sequences_.size()); }
  bool finished() const { return num_finished_ == size(); }

  // Hands every pending delta to `sink(sequence index, delta)`; returns how
  // many were handed. Never blocks.
  using Sink = std::function<void(int, engine::RequestOutput&)>;
  int poll(const Sink& sink);
  // Aborts every unfinished sequence (idempotent); their final deltas follow.
  void abort();
  bool aborted() const { return aborted_; }

 private:
  struct Notifier {
    std::mutex mutex;
    std::function<void()> notify;  // guarded by mutex; empty once the call is gone
  };
  struct Sequence {
    std::unique_ptr<GenerationStream> stream;
    bool finished = false;
  };

  explicit GenerationCall(std::shared_ptr<Notifier> notifier) : notifier_(std::move(notifier)) {}

  std::shared_ptr<Notifier> notifier_;
  std::vector<Sequence> sequences_;
  int num_finished_ = 0;
  bool aborted_ = false;
  engine::RequestOutput scratch_;  // reused by poll(): its buffers are recycled
};

}  // namespace vpod::server
