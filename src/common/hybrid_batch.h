// The metadata of one engine step: which sequences run, where their K/V live,
// and which tokens are new. Built once per step on the CPU by the scheduler
// (src/engine); the model runtime and the attention planner read it, and every
// layer reuses the plan made from it.
//
// The flattened token list holds every prefill chunk's new tokens, in order,
// followed by one token per decode:
//   [chunk 0 tokens | chunk 1 tokens | ... | decode 0 | decode 1 | ...]
#pragma once

#include <cstdint>
#include <vector>

namespace vpod {

struct BatchSequence {
  int slot = 0;          // KV-cache slot of the request
  int cached_len = 0;    // tokens already in the cache before this step
  int num_new = 0;       // new tokens this step (1 for a decode)
  int token_offset = 0;  // index of the first new token in the flattened list
  // New query i (0-based) sits at position cached_len + i and attends to
  // positions [0, cached_len + i] (bottom-right causal).
  int context_len() const { return cached_len + num_new; }
};

struct HybridBatch {
  std::vector<BatchSequence> prefills;  // chunks of prompts (num_new >= 1)
  std::vector<BatchSequence> decodes;   // one token each; after all prefills
  std::vector<std::int32_t> token_ids;  // [num_tokens] flattened as above
  std::vector<std::int32_t> positions;  // [num_tokens] absolute position of each token

  int num_prefill_tokens() const {
    int n = 0;
    for (const BatchSequence& s : prefills) n += s.num_new;
    return n;
  }
  int num_decode_tokens() const { return static_cast<int>(decodes.size()); }
  int num_tokens() const { return num_prefill_tokens() + num_decode_tokens(); }
  bool empty() const { return prefills.empty() && decodes.empty(); }
  void clear() {
    prefills.clear();
    decodes.clear();
    token_ids.clear();
    positions.clear();
  }
};

}  // namespace vpod
