// One HTTP request's sequences in the engine: n choices for each prompt,
// submitted together, drained together, aborted together.
//
// Threading: owned and used by the HTTP worker thread serving the request;
// the engine thread only calls the wake callback, which bumps a counter under
// a mutex and notifies.
#pragma once

#include <chrono>
#include <condition_variable>
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
  // Submits every spec. On a failure, what was submitted is aborted and the
  // backend's status comes back as an error (400, or 503 when the engine is
  // out of room).
  static ApiResult<std::unique_ptr<GenerationCall>> start(ServingBackend& backend,
                                                          std::vector<engine::RequestSpec> specs);
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
  // Blocks until a sequence has something new or `timeout` passes.
  void wait(std::chrono::milliseconds timeout);
  // Aborts every unfinished sequence (idempotent); their final deltas follow.
  void abort();
  bool aborted() const { return aborted_; }

 private:
  struct Wakeup {
    std::mutex mutex;
    std::condition_variable cv;
    std::uint64_t version = 0;  // guarded by mutex
  };
  struct Sequence {
    std::unique_ptr<GenerationStream> stream;
    bool finished = false;
  };

  explicit GenerationCall(std::shared_ptr<Wakeup> wakeup) : wakeup_(std::move(wakeup)) {}

  std::shared_ptr<Wakeup> wakeup_;
  std::uint64_t seen_version_ = 0;
  std::vector<Sequence> sequences_;
  int num_finished_ = 0;
  bool aborted_ = false;
  engine::RequestOutput scratch_;  // reused by poll(): its buffers are recycled
};

}  // namespace vpod::server
