// One constrained request's grammar as the model runner keeps it: the
// matcher, the next-token bitmask filled from it, and the bookkeeping of the
// job (mask_workers.h) that advances it off the engine thread. Shared by the
// request and by a job in flight, so a request that ends while its job runs
// (an abort) frees nothing the job still uses.
//
// Ownership: while `busy` a worker thread owns every field but `busy`; else
// the model runner's thread does. The engine thread reads only the immutable
// stop ids (the grammar's end is decided from the sampled token).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/matcher.h"

namespace vpod::grammar {

struct GrammarState : std::enable_shared_from_this<GrammarState> {
  explicit GrammarState(std::unique_ptr<Matcher> m);

  std::unique_ptr<Matcher> matcher;
  // [token_bitmask_words(vocab)]: the ids allowed after the first
  // `mask_for` outputs; valid when mask_for == the request's outputs.
  std::vector<std::uint32_t> mask;
  int mask_for = -1;  // outputs the mask was filled after (-1: never filled)
  int accepted = 0;   // outputs the matcher has accepted
  // The matcher refused one of its outputs (a sampler that ignored the
  // mask; never in a correct engine), or has already ended: `mask` is then
  // all ones and the engine fails the request.
  bool rejected = false;
  // The outputs the job in flight accepts (copied: the request may end first).
  std::vector<std::int32_t> pending;
  std::atomic<bool> busy{false};
};

}  // namespace vpod::grammar
