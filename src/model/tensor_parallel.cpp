// Tensor-parallel shard layouts (tensor_parallel.h): which slice of each
// sharded dimension a rank holds, and the checks that a model divides.
#include "model/tensor_parallel.h"

#include <fmt/format.h>

namespace vpod::model {

Result<ShardLayout> shard_layout(const ModelConfig& c, int size, int rank) {
  if (size < 1) {
    return invalid_argument(fmt::format("--tensor-parallel-size must be >= 1, got {}", size));
  }
  if (rank < 0 || rank >= size) {
    return invalid_argument(fmt::format("tensor-parallel rank {} outside [0, {})", rank, size));
  }
  auto refuse = [&](const char* what, int value) {
    return invalid_argument(
        fmt::format("--tensor-parallel-size {}: the model's {} ({}) is not divisible by {}", size,
                    what, value, size));
  };
  if (c.num_q_heads % size != 0) return refuse("attention heads", c.num_q_heads);
  if (c.intermediate_size % size != 0) return refuse("intermediate size", c.intermediate_size);
  if (c.vocab_size % size != 0) return refuse("vocabulary size", c.vocab_size);
  ShardLayout s;
  s.rank = rank;
  s.size = size;
  s.num_q_heads = c.num_q_heads / size;
  s.intermediate_size = c.intermediate_size / size;
  s.vocab_size = c.vocab_size / size;
  if (c.num_kv_heads >= size) {
    if (c.num_kv_heads % size != 0) return refuse("KV heads", c.num_kv_heads);
    s.num_kv_heads = c.num_kv_heads / size;
    s.first_kv_head = rank * s.num_kv_heads;
  } else {
    // Fewer KV heads than ranks: each KV head is replicated on size /
    // kv_heads ranks, which hold the query heads of its group.
    if (size % c.num_kv_heads != 0) {
      return invalid_argument(fmt::format(
          "--tensor-parallel-size {}: the model's {} KV heads can be replicated only when the "
          "size is a multiple of them",
          size, c.num_kv_heads));
    }
    s.num_kv_heads = 1;
    s.first_kv_head = rank * c.num_kv_heads / size;
  }
  return s;
}

ModelConfig shard_config(const ModelConfig& config, const ShardLayout& layout) {
  ModelConfig c = config;
  c.num_q_heads = layout.num_q_heads;
  c.num_kv_heads = layout.num_kv_heads;
  c.intermediate_size = layout.intermediate_size;
  c.vocab_size = layout.vocab_size;
  return c;
}

}  // namespace vpod::model
