// Host-side construction of a step's metadata arrays from a HybridBatch
// (shared by the backends: the CPU uses them in place, CUDA uploads them).
#pragma once

#include <cstdint>
#include <vector>

#include "common/hybrid_batch.h"
#include "common/status.h"
#include "model/backend.h"

namespace vpod::model {

struct StepArrays {
  std::vector<std::int32_t> token_ids, positions, token_slots, token_kv_index;
  std::vector<std::int32_t> seq_slot, seq_cached_len, seq_num_new, seq_token_offset;
  std::vector<std::int32_t> logit_rows;
};

// Checks the batch's internal consistency (offsets, counts, sizes) against
// `vocab_size` and the KV geometry, and fills `arrays`.
Status build_step_arrays(const HybridBatch& batch, LogitsMode mode, int vocab_size,
                         StepArrays* arrays);

}  // namespace vpod::model
