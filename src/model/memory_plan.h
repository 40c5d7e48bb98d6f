// How much GPU memory the KV cache gets: the card's memory times
// --gpu-memory-utilization, minus what is already taken once the model is
// loaded (weights, activation buffers for the largest step, GEMM workspace,
// the CUDA context, other processes). Measured after load, so nothing is
// estimated twice.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace vpod::model {

struct GpuMemoryPlan {
  std::size_t total_bytes = 0;       // the card
  std::size_t budget_bytes = 0;      // total * utilization
  std::size_t in_use_bytes = 0;      // total - free after loading the model
  std::size_t weight_bytes = 0;      // of which weights
  std::size_t activation_bytes = 0;  // of which activations
  std::size_t kv_bytes = 0;          // what the KV cache may take
  std::size_t kv_tokens = 0;         // kv_bytes / bytes per token (all layers, K and V)
  std::string to_string() const;
};

// A resource_exhausted Status when nothing is left for the cache.
Result<GpuMemoryPlan> plan_gpu_memory(std::size_t total_bytes, std::size_t free_bytes,
                                      double utilization, std::size_t weight_bytes,
                                      std::size_t activation_bytes, std::size_t kv_bytes_per_token);

}  // namespace vpod::model
