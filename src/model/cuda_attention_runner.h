// The CUDA backend's attention: plans a step into the caller's StepPlan (the
// one place the model runtime calls the kernels' planners) and runs one
// layer's attention as that plan says. A contiguous (vAttention) cache: the
// fused POD launch, or vpod's prefill then decode kernels; the simple exact
// kernel (simple_attention.h) when they do not cover the dtype or head_dim,
// or when options ask for it. A paged cache: FlashInfer's kernels
// (kernels/attention/flashinfer), prefill then decode, or with --attention
// pod FlashInfer's (FA2-based) POD kernel for hybrid steps.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>

#include "common/kv_view.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "kernels/attention/pod.h"
#include "model/backend.h"
#include "model/step_plan.h"

namespace vpod::model {

class AttentionRunner {
 public:
  // `num_sms`: the GPU's SM count (serial plans).
  AttentionRunner(const CudaBackendOptions& options, int num_sms, cudaStream_t stream)
      : options_(options), num_sms_(num_sms), stream_(stream) {}

  // Whether the attention kernels run heads of this size in the backend's
  // dtype (else the simple kernel).
  bool uses_kernels(int head_dim) const;
  // Whether FlashInfer's paged kernels run heads of this size in the
  // backend's dtype on this device (a paged cache needs them).
  bool supports_paged(int head_dim) const;
  // fi::paged_kernels_label for this runner's attention mode, or why none runs.
  std::string paged_description() const;

  // Plans the step into `plan` and uploads it to the plan's buffers.
  // `paged_kv`: a layer of the paged cache (null: contiguous). Returns true
  // when the buffers were reallocated (grown to a larger step): graphs
  // recorded against the old ones are stale.
  Result<bool> plan(const StepTensors& step, int num_q_heads, int num_kv_heads, int head_dim,
                    const PagedKvView* paged_kv, StepPlan& plan);

  // One layer's attention: q, out [T, q_heads, D] over layer `layer` of kv.
  Status run(const StepPlan& plan, const TensorView& q, const KvCacheView& kv, int layer,
             const StepTensors& step, float scale, const TensorView& out);

 private:
  Status run_kernels(const StepPlan& plan, const TensorView& q, const KvLayerView& kv, float scale,
                     const TensorView& out);

  const CudaBackendOptions& options_;  // the backend's (decode tuning may change)
  int num_sms_;
  cudaStream_t stream_;
  // POD: the device's occupancy (once) and the fused kernel's scheduling
  // counters (one set per stream).
  std::optional<attention::PodDevice> pod_device_;
  // Serial plans: the device's cluster-merged decode slots and the
  // warp-specialized prefill's CTAs per SM (both queried once, together).
  std::optional<attention::DecodeClusterSlots> cluster_slots_;
  int ws_prefill_ctas_per_sm_ = 0;
  std::optional<attention::PodCounters> pod_counters_;
  // supports_paged()'s answer for one head_dim (-1: not asked yet).
  mutable int paged_support_head_dim_ = -1;
  mutable bool paged_support_ = false;
};

}  // namespace vpod::model
