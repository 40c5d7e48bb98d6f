// CUDA graphs of whole decode steps for the CUDA backend, cached by launch
// shape (StepGraphKey): a shape is recorded the second time it is seen (the
// first, eager run loads every kernel and caches cuBLASLt's choices outside
// the capture), then replayed; least recently used graphs are evicted.
#pragma once

#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "common/status.h"
#include "cuda/graph.h"
#include "model/backend.h"
#include "model/step_plan.h"

namespace vpod::model {

// Everything a recorded step's launches bake in beyond the per-step data in
// fixed buffers (see Backend::try_step_graph). -1: not part of this step.
struct StepGraphKey {
  // The step's counts (StepTensors).
  int num_tokens = -1;
  int num_sequences = -1;
  int num_logit_rows = -1;
  // The kernels' plan: work-list sizes (grids of the launches).
  int prefill_items = -1;
  int decode_items = -1;
  int prefill_combines = -1;
  int decode_combines = -1;
  int partial_rows = -1;
  // The fused POD launch's configuration (grid, kinds).
  int pod_mode = -1;
  int pod_grid = -1;
  int pod_prefill_ctas = -1;
  int pod_ratio = -1;
  // FlashInfer's paged plan (PagedPlan::launch_key: plan infos, buffers).
  std::uint64_t flashinfer_plan = 0;
  // The plan's device buffers (the launches read their work lists there).
  const void* plan_metadata = nullptr;
  const void* plan_workspace = nullptr;
  // The caller's weights, activations and KV views (Backend::try_step_graph).
  std::uint64_t caller_key = 0;

  auto operator<=>(const StepGraphKey&) const = default;
};

StepGraphKey make_step_graph_key(const StepTensors& step, const StepPlan& plan,
                                 std::uint64_t caller_key);

class StepGraphCache {
 public:
  StepGraphCache(cudaStream_t stream, int max_graphs) : stream_(stream), max_graphs_(max_graphs) {}
  ~StepGraphCache();

  // Launches the graph of `key` if recorded (launched), says to record it
  // when seen before (capture), else remembers it (eager). Remembers `key`
  // for begin_capture.
  StepGraph lookup(const StepGraphKey& key);
  Status begin_capture();
  // Instantiates, caches and launches the recorded graph.
  Status end_capture();
  // Ends a recording whose ops failed; drops it.
  void cancel_capture();
  // Drops every graph and seen shape (their launches are stale).
  void clear();
  StepGraphStats stats() const;
  int max_graphs() const { return max_graphs_; }

 private:
  struct Entry {
    cuda::GraphExec exec;
    std::uint64_t last_use = 0;
  };
  static constexpr std::size_t kMaxSeenShapes = 4096;

  cudaStream_t stream_;
  int max_graphs_;
  std::map<StepGraphKey, Entry> graphs_;
  std::set<StepGraphKey> seen_;  // shapes seen once (recorded when seen again)
  std::uint64_t clock_ = 0;
  StepGraphStats stats_;
  std::optional<cuda::GraphCapture> capture_;
  StepGraphKey pending_{};  // the last lookup's key
};

}  // namespace vpod::model
