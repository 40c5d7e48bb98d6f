// The KV memory budget (memory_plan.h): plan_gpu_memory and the plan's summary.

#include "model/memory_plan.h"

#include <algorithm>
#include <cstdio>

namespace vpod::model {

namespace {
double gb(std::size_t b) { return static_cast<double>(b) / 1e9; }
}  // namespace

std::string GpuMemoryPlan::to_string() const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "GPU memory: %.1f GB total, budget %.1f GB; in use %.1f GB (weights %.1f GB, "
                "activations %.2f GB); KV cache %.1f GB = %zu tokens",
                gb(total_bytes), gb(budget_bytes), gb(in_use_bytes), gb(weight_bytes),
                gb(activation_bytes), gb(kv_bytes), kv_tokens);
  return buf;
}

Result<GpuMemoryPlan> plan_gpu_memory(std::size_t total_bytes, std::size_t free_bytes,
                                      double utilization, std::size_t weight_bytes,
                                      std::size_t activation_bytes,
                                      std::size_t kv_bytes_per_token) {
  if (!(utilization > 0.0 && utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1], got " +
                            std::to_string(utilization));
  }
  if (free_bytes > total_bytes || kv_bytes_per_token == 0) {
    return invalid_argument("inconsistent memory figures");
  }
  GpuMemoryPlan p;
  p.total_bytes = total_bytes;
  p.budget_bytes = static_cast<std::size_t>(static_cast<double>(total_bytes) * utilization);
  p.in_use_bytes = total_bytes - free_bytes;
  p.weight_bytes = weight_bytes;
  p.activation_bytes = activation_bytes;
  if (p.budget_bytes <= p.in_use_bytes) {
    return resource_exhausted("no GPU memory left for the KV cache: " + p.to_string() +
                              "; raise --gpu-memory-utilization or lower --max-num-batched-tokens");
  }
  // Never more than is actually free.
  p.kv_bytes = std::min(p.budget_bytes - p.in_use_bytes, free_bytes);
  p.kv_tokens = p.kv_bytes / kv_bytes_per_token;
  if (p.kv_tokens == 0)
    return resource_exhausted("KV cache budget holds no token: " + p.to_string());
  return p;
}

}  // namespace vpod::model
