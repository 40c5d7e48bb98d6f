// How one rank of a tensor-parallel group shares the model (Megatron-style;
// docs/model.md, "Tensor parallelism"):
//   - column-parallel: the fused QKV projection (this rank's q heads and kv
//     heads) and the fused gate/up projection (its intermediate slice);
//   - row-parallel: o_proj and down_proj take this rank's input columns; their
//     partial outputs are summed by one all-reduce each;
//   - vocab-parallel: the embedding and the LM head hold a slice of the vocab
//     rows; the embedding zeroes the other ids and all-reduces, the LM head's
//     logit slices are gathered on rank 0 for sampling;
//   - KV heads are split across ranks, or replicated when there are fewer KV
//     heads than ranks (ranks r with the same r * kv_heads / size share one).
// Norm weights are replicated.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "model/model_config.h"

namespace vpod::model {

class Communicator;

// A rank's place in the group; size 1 (no communicator) is the whole model.
struct TensorParallel {
  int rank = 0;
  int size = 1;
  Communicator* comm = nullptr;  // needed when size > 1; outlives the model
};

// One rank's slice of each sharded dimension.
struct ShardLayout {
  int rank = 0;
  int size = 1;
  int num_q_heads = 0;   // this rank's query heads: [rank * num_q_heads, +num_q_heads)
  int num_kv_heads = 0;  // this rank's KV heads, from first_kv_head
  int first_kv_head = 0;
  int intermediate_size = 0;  // columns [rank * intermediate_size, +intermediate_size)
  int vocab_size = 0;         // vocab rows [rank * vocab_size, +vocab_size)
  int first_q_head() const { return rank * num_q_heads; }
  std::int64_t first_intermediate() const {
    return static_cast<std::int64_t>(rank) * intermediate_size;
  }
  std::int64_t first_vocab() const { return static_cast<std::int64_t>(rank) * vocab_size; }
};

// The layout of `rank` in a group of `size`, or invalid_argument naming the
// dimension that does not divide (query heads, KV heads, intermediate size,
// vocabulary) and its numbers.
Result<ShardLayout> shard_layout(const ModelConfig& config, int size, int rank);

// The config one rank computes with: heads, intermediate and vocab sizes are
// the rank's (what the forward's shapes and the rank's KV cache use).
ModelConfig shard_config(const ModelConfig& config, const ShardLayout& layout);

}  // namespace vpod::model
