// What happens to a sampled token after the forward: stop rules, incremental
// detokenization, the stream delta and the per-token metrics.
//
// Stop rules, checked in this order once min_tokens tokens exist:
//   1. the token is an EOS id (unless ignore_eos) or in stop_token_ids;
//   2. the detokenized text now contains a stop string;
//   3. max_tokens reached, or the model's context length (--max-model-len).
// Stop strings can straddle tokens, so text that could still be the start of
// one is held back: after each token we stream all new text except its
// longest suffix that is a proper prefix of some stop string. A stop string
// therefore always starts inside the unsent text, and cutting it never takes
// back text the client already has.
#pragma once

#include <string_view>

#include "engine/metrics.h"
#include "engine/model_executor.h"
#include "engine/output_stream.h"
#include "engine/request.h"

namespace vpod::engine {

class OutputProcessor {
 public:
  explicit OutputProcessor(EngineMetrics& metrics);

  // Handles the token just appended to r.token_ids (Scheduler::commit) and
  // pushes a delta. Returns true when a stop rule finished the request (its
  // state and finish_reason are set; the caller frees it).
  bool on_token(Request& r, const SampledToken& sampled, Clock::time_point now);

  // Whether on_token will finish r for its newest token by rule 1 or 3 (a
  // stop/EOS id, max_tokens, the context length): decided from the token id
  // alone, without detokenizing, so the pipelined loop frees such requests
  // before planning the next step. Rule 2 (stop strings) needs on_token.
  static bool stops_by_token(const Request& r);
  // Structured output: the request's grammar took its stop token (complete).
  static bool ends_grammar(const Request& r);

  // Ends a request that did not stop by itself (abort, engine error) with a
  // final delta carrying `reason` (and `error` for FinishReason::error).
  void end(Request& r, FinishReason reason, std::string_view error, Clock::time_point now);

 private:
  void finish(Request& r, FinishReason reason, Clock::time_point now);
  // The request-level metrics of an ended request (finished or not).
  void observe_end(const Request& r, FinishReason reason, Clock::time_point now);

  EngineMetrics& metrics_;
  RequestOutput delta_;  // reused for every delta (capacity kept)
};

}  // namespace vpod::engine
