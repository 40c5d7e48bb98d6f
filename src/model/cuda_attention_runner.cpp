// The CUDA backend's attention: planning into a StepPlan and one dispatch
// over it (see cuda_attention_runner.h).
#include "model/cuda_attention_runner.h"

#include <algorithm>

#include "common/check.h"
#include "common/cuda_check.h"
#include "model/simple_attention.h"

namespace vpod::model {

namespace {

// Buffers grow to twice the need (at least 64 KiB), so growth stays rare.
constexpr std::size_t kMinPlanBufferBytes = std::size_t{1} << 16;

}  // namespace

bool AttentionRunner::uses_kernels(int head_dim) const {
  if (options_.attention != AttentionImpl::kernels || options_.dtype == DType::f32) return false;
  return head_dim == 64 || head_dim == 128;
}

bool AttentionRunner::supports_paged(int head_dim) const {
  // Asked every step (Model::validate_kv): the device query runs once per
  // head_dim. Heads 1:1 stand in for the model's (the group is checked when
  // planning).
  if (paged_support_head_dim_ != head_dim) {
    paged_support_ =
        attention::fi::paged_attention_supported({1, 1, head_dim, options_.dtype}).ok();
    paged_support_head_dim_ = head_dim;
  }
  return paged_support_;
}

std::string AttentionRunner::paged_description() const {
  auto label = attention::fi::paged_kernels_label(options_.attention_mode == AttentionMode::pod
                                                      ? attention::fi::PagedMode::pod
                                                      : attention::fi::PagedMode::serial);
  return label.ok() ? *label : "no paged attention: " + label.status().to_string();
}

Result<bool> AttentionRunner::plan(const StepTensors& step, int num_q_heads, int num_kv_heads,
                                   int head_dim, const PagedKvView* paged_kv, StepPlan& plan) {
  plan.clear();
  plan.paged_kv = paged_kv != nullptr;
  if (paged_kv != nullptr) {
    // FlashInfer's plan. Only decode-only steps are replayed as graphs: they
    // plan in FlashInfer's CUDA-graph mode (a launch shape fixed by the batch
    // size), the others as FlashInfer's eager wrappers do. --attention pod:
    // FlashInfer's POD kernel for the hybrid steps.
    const attention::AttentionDims dims{num_q_heads, num_kv_heads, head_dim, options_.dtype};
    const bool cuda_graph = step.batch->prefills.empty();
    const attention::fi::PagedMode mode = options_.attention_mode == AttentionMode::pod
                                              ? attention::fi::PagedMode::pod
                                              : attention::fi::PagedMode::serial;
    VPOD_ASSIGN_OR_RETURN(const bool moved, plan.paged.build(*step.batch, dims, *paged_kv,
                                                             cuda_graph, stream_, mode));
    plan.kind = StepPlan::Kind::flashinfer;
    plan.ready = true;
    return moved;
  }
  if (!uses_kernels(head_dim)) {
    plan.ready = true;  // the simple kernel needs no plan
    return false;
  }
  const attention::AttentionDims dims{num_q_heads, num_kv_heads, head_dim, options_.dtype};
  VPOD_RETURN_IF_ERROR(attention::validate_dims(dims));
  // The one call into the kernels' planners.
  if (options_.attention_mode == AttentionMode::pod) {
    // POD: the fused prefill+decode kernel for hybrid batches; a prefill-
    // or decode-only step runs the serial kernels (the same plan as serial).
    if (!pod_device_) {
      VPOD_ASSIGN_OR_RETURN(pod_device_,
                            attention::query_pod_device(dims, options_.kernels.wgmma_prefill));
      VPOD_ASSIGN_OR_RETURN(pod_counters_, attention::PodCounters::create(stream_));
    }
    const bool hybrid = !step.batch->prefills.empty() && !step.batch->decodes.empty();
    attention::PodOptions pod_options;
    pod_options.mode = hybrid ? attention::AttentionMode::pod : attention::AttentionMode::serial;
    pod_options.device = *pod_device_;
    pod_options.kernels = options_.kernels;
    VPOD_RETURN_IF_ERROR(plan.pod.build(*step.batch, dims, pod_options));
    plan.kind = StepPlan::Kind::pod;
  } else {
    if (!cluster_slots_) {
      VPOD_ASSIGN_OR_RETURN(cluster_slots_, attention::query_decode_cluster_slots(dims));
      VPOD_ASSIGN_OR_RETURN(ws_prefill_ctas_per_sm_, attention::query_ws_prefill_ctas_per_sm(dims));
    }
    VPOD_RETURN_IF_ERROR(plan.serial.build(*step.batch, dims,
                                           {.num_sms = num_sms_,
                                            .kernels = options_.kernels,
                                            .decode_cluster_slots = *cluster_slots_,
                                            .ws_prefill_ctas_per_sm = ws_prefill_ctas_per_sm_}));
    plan.kind = StepPlan::Kind::serial;
  }
  const attention::AttentionPlan& work = *plan.work();
  bool moved = false;
  if (work.metadata_bytes() > plan.metadata.bytes() ||
      work.workspace_bytes() > plan.workspace.bytes()) {
    // Rare growth: the buffers only ever grow to the largest step seen.
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), StatusCode::internal);
    if (work.metadata_bytes() > plan.metadata.bytes()) {
      VPOD_ASSIGN_OR_RETURN(plan.metadata, cuda::DeviceBuffer::allocate(std::max<std::size_t>(
                                               work.metadata_bytes() * 2, kMinPlanBufferBytes)));
    }
    if (work.workspace_bytes() > plan.workspace.bytes()) {
      VPOD_ASSIGN_OR_RETURN(plan.workspace, cuda::DeviceBuffer::allocate(std::max<std::size_t>(
                                                work.workspace_bytes() * 2, kMinPlanBufferBytes)));
    }
    moved = true;
  }
  VPOD_RETURN_IF_ERROR(work.upload(plan.buffers(), stream_));
  plan.ready = true;
  return moved;
}

Status AttentionRunner::run_kernels(const StepPlan& plan, const TensorView& q,
                                    const KvLayerView& kv, float scale, const TensorView& out) {
  const attention::AttentionBuffers buffers = plan.buffers();
  if (plan.kind == StepPlan::Kind::pod) {
    return attention::hybrid_attention(plan.pod, buffers, *pod_counters_, q, kv, out, scale,
                                       stream_);
  }
  const attention::AttentionPlan& work = plan.serial;
  if (work.num_prefill_tokens() > 0) {
    VPOD_RETURN_IF_ERROR(attention::prefill(work, buffers, q, kv, out, scale, stream_));
  }
  if (work.num_decode_tokens() > 0) {
    VPOD_RETURN_IF_ERROR(attention::decode(work, buffers, q, kv, out, scale, stream_));
  }
  return {};
}

Status AttentionRunner::run(const StepPlan& plan, const TensorView& q, const KvCacheView& kv,
                            int layer, const StepTensors& step, float scale,
                            const TensorView& out) {
  if (!plan.ready) return failed_precondition("attention before plan_attention for this step");
  if (kv.is_paged()) {
    if (plan.kind != StepPlan::Kind::flashinfer) {
      return failed_precondition("a paged KV cache needs the step planned for it");
    }
    return plan.paged.run(q, kv.paged[layer], out, scale, stream_);
  }
  if (q.dtype() != DType::f32 && uses_kernels(static_cast<int>(q.size(2)))) {
    VPOD_CHECK(plan.work() != nullptr);
    return run_kernels(plan, q, kv.contiguous[layer], scale, out);
  }
  simple_attention_gpu(q, kv.contiguous[layer], step.token_slots, step.token_kv_index, scale, out,
                       stream_);
  return {};
}

}  // namespace vpod::model
