// A step's metadata arrays (step_metadata.h), built on the host from a
// HybridBatch, whose consistency is checked on the way.

#include "model/step_metadata.h"

#include <string>

namespace vpod::model {

Status build_step_arrays(const HybridBatch& batch, LogitsMode mode, int vocab_size, StepArrays* a) {
  const int num_tokens = batch.num_tokens();
  if (batch.empty() || num_tokens == 0) return invalid_argument("empty batch");
  if (static_cast<int>(batch.token_ids.size()) != num_tokens ||
      static_cast<int>(batch.positions.size()) != num_tokens) {
    return invalid_argument("batch has " + std::to_string(batch.token_ids.size()) +
                            " token ids and " + std::to_string(batch.positions.size()) +
                            " positions for " + std::to_string(num_tokens) + " tokens");
  }
  a->token_ids.assign(batch.token_ids.begin(), batch.token_ids.end());
  a->positions.assign(batch.positions.begin(), batch.positions.end());
  a->token_slots.assign(num_tokens, -1);
  a->token_kv_index.assign(num_tokens, 0);
  a->seq_slot.clear();
  a->seq_cached_len.clear();
  a->seq_num_new.clear();
  a->seq_token_offset.clear();
  a->logit_rows.clear();
  int expected_offset = 0;
  auto add = [&](const BatchSequence& s, bool decode) -> Status {
    if (s.num_new < 1 || (decode && s.num_new != 1) || s.cached_len < 0 || s.slot < 0) {
      return invalid_argument("batch sequence in slot " + std::to_string(s.slot) + " has num_new " +
                              std::to_string(s.num_new) + ", cached_len " +
                              std::to_string(s.cached_len));
    }
    if (s.token_offset != expected_offset) {
      return invalid_argument("batch sequence in slot " + std::to_string(s.slot) +
                              " starts at token " + std::to_string(s.token_offset) + ", expected " +
                              std::to_string(expected_offset));
    }
    for (int i = 0; i < s.num_new; ++i) {
      a->token_slots[s.token_offset + i] = s.slot;
      a->token_kv_index[s.token_offset + i] = s.cached_len + i;
    }
    a->seq_slot.push_back(s.slot);
    a->seq_cached_len.push_back(s.cached_len);
    a->seq_num_new.push_back(s.num_new);
    a->seq_token_offset.push_back(s.token_offset);
    if (mode != LogitsMode::all_tokens) a->logit_rows.push_back(s.token_offset + s.num_new - 1);
    expected_offset += s.num_new;
    return {};
  };
  for (const auto& s : batch.prefills) VPOD_RETURN_IF_ERROR(add(s, false));
  for (const auto& s : batch.decodes) VPOD_RETURN_IF_ERROR(add(s, true));
  for (int t = 0; t < num_tokens; ++t) {
    if (a->token_ids[t] < 0 || a->token_ids[t] >= vocab_size) {
      return invalid_argument("token id " + std::to_string(a->token_ids[t]) +
                              " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
    if (a->positions[t] < 0) return invalid_argument("negative position in batch");
  }
  if (mode == LogitsMode::all_tokens) {
    for (int t = 0; t < num_tokens; ++t) a->logit_rows.push_back(t);
  }
  return {};
}

}  // namespace vpod::model
