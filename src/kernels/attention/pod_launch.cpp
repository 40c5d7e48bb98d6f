// The POD launchers: validate every input like attention_launch.cpp, fill the
// fused kernel's parameters from the plan, enqueue it (and the combine when
// the plan split KV); the device queries behind PodDevice and PodCounters.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/cuda_check.h"
#include "kernels/attention/attention_kernels.h"
#include "kernels/attention/attention_validate.h"
#include "kernels/attention/kv_tensor_map.h"
#include "kernels/attention/pod.h"
#include "kernels/attention/pod_kernels.h"

namespace vpod::attention {
namespace {

Status check_inputs(const PodPlan& plan, const AttentionBuffers& buffers, const TensorView& q,
                    const TensorView& out, float softmax_scale) {
  if (plan.mode() != AttentionMode::pod) {
    return invalid_argument("attention::pod needs a plan made in mode pod (got serial)");
  }
  const AttentionPlan& ap = plan.attention();
  VPOD_RETURN_IF_ERROR(validate_token_view("q", q, ap, ap.dims().num_q_heads));
  VPOD_RETURN_IF_ERROR(validate_token_view("out", out, ap, ap.dims().num_q_heads));
  VPOD_RETURN_IF_ERROR(validate_softmax_scale(softmax_scale));
  return validate_buffers(buffers, ap);
}

Status check_counters(const PodPlan& plan, const PodCounters& counters, const PodTrace& trace) {
  if (plan.config().grid > 0) {
    if (counters.data() == nullptr || counters.num_sm_counters() < 1) {
      return invalid_argument("POD counters are not created (PodCounters::create)");
    }
  }
  if (trace.data != nullptr && trace.capacity_ctas < plan.config().grid) {
    return invalid_argument(fmt::format("POD trace holds {} CTAs; the launch has {}",
                                        trace.capacity_ctas, plan.config().grid));
  }
  return Status();
}

// `maps`: TMA descriptors of a contiguous cache (valid = 0: cp.async loads).
Status run_pod(const PodPlan& plan, const AttentionBuffers& buffers, const PodCounters& counters,
               const TensorView& q, const TensorView& out, float softmax_scale,
               const KvAddressing& kv, const KvTensorMaps& maps, cudaStream_t stream,
               const PodTrace& trace) {
  const PodConfig& config = plan.config();
  if (config.grid == 0) return Status();
  const AttentionPlan& ap = plan.attention();
  const AttentionDims& dims = ap.dims();
  PodParams p;
  // The serial launchers' parameters (the prefill side's lazy max included:
  // POD's prefill rows equal the serial tile's bit for bit).
  p.attn = detail::make_params(ap, buffers, q, out, softmax_scale, kv);
  p.attn.kv_tma = maps;
  const AttentionParams& a = p.attn;
  p.counters = counters.data();
  p.num_sm_counters = counters.num_sm_counters();
  p.prefill_ctas = config.prefill_ctas;
  p.decode_ctas = config.decode_ctas;
  p.ratio_even = config.ratio == PodRatio::even ? 1 : 0;
  p.wgmma_prefill = config.wgmma_prefill ? 1 : 0;
  p.trace = trace.data;
  // Split decodes merge in the kernel where the plan has the decode kernel's
  // self-resetting arrival counters; else the combine launch below.
  const bool decode_merged = a.plan.decode_counters != nullptr;
  const KernelOptions& options = ap.kernel_options();
  VPOD_RETURN_IF_ERROR(dims.dtype == DType::f16
                           ? detail::launch_pod_f16(p, options, dims.head_dim, stream)
                           : detail::launch_pod_bf16(p, options, dims.head_dim, stream));
  // KV splits: one combine per kind (they only read the kernel's partials).
  for (const auto& [items, count] :
       {std::pair{a.plan.prefill_combines, ap.prefill_combines().size()},
        std::pair{a.plan.decode_combines, decode_merged ? 0 : ap.decode_combines().size()}}) {
    if (count == 0) continue;
    VPOD_RETURN_IF_ERROR(detail::launch_combine(detail::make_combine(a, ap, items, count),
                                                dims.dtype, dims.head_dim, stream));
  }
  return Status();
}

}  // namespace

Result<PodDevice> query_pod_device(const AttentionDims& dims, bool allow_wgmma) {
  VPOD_RETURN_IF_ERROR(validate_dims(dims));
  int device = 0;
  PodDevice info;
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), StatusCode::unavailable);
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&info.num_sms, cudaDevAttrMultiProcessorCount, device),
      StatusCode::unavailable);
  if (allow_wgmma) {
    VPOD_ASSIGN_OR_RETURN(info.wgmma_prefill,
                          dims.dtype == DType::f16
                              ? detail::pod_wgmma_runs_here_f16(dims.head_dim)
                              : detail::pod_wgmma_runs_here_bf16(dims.head_dim));
    VPOD_ASSIGN_OR_RETURN(info.ws_prefill_ctas_per_sm, query_ws_prefill_ctas_per_sm(dims));
  }
  VPOD_ASSIGN_OR_RETURN(info.decode_cluster_slots, query_decode_cluster_slots(dims));
  VPOD_ASSIGN_OR_RETURN(info.ctas_per_sm,
                        dims.dtype == DType::f16
                            ? detail::pod_ctas_per_sm_f16(dims.head_dim, info.wgmma_prefill)
                            : detail::pod_ctas_per_sm_bf16(dims.head_dim, info.wgmma_prefill));
  if (info.ctas_per_sm < 1) {
    return internal_error("the POD kernel does not fit on an SM of this GPU");
  }
  return info;
}

Result<PodCounters> PodCounters::create(cudaStream_t stream) {
  VPOD_ASSIGN_OR_RETURN(const int nsmid, detail::query_nsmid(stream));
  if (nsmid < 1) return internal_error(fmt::format("%nsmid reads {}", nsmid));
  PodCounters counters;
  counters.num_sm_counters_ = std::min(nsmid, kPodMaxSmCounters);
  const std::size_t bytes =
      static_cast<std::size_t>(kPodCounterHeader + counters.num_sm_counters_) *
      sizeof(std::uint32_t);
  VPOD_ASSIGN_OR_RETURN(counters.buffer_, cuda::DeviceBuffer::allocate(bytes));
  VPOD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(counters.buffer_.data(), 0, bytes, stream),
                            StatusCode::internal);
  return counters;
}

Status pod(const PodPlan& plan, const AttentionBuffers& buffers, const PodCounters& counters,
           const TensorView& q, const KvLayerView& kv, const TensorView& out, float softmax_scale,
           cudaStream_t stream, const PodTrace& trace) {
  VPOD_RETURN_IF_ERROR(check_inputs(plan, buffers, q, out, softmax_scale));
  if (!plan.config().fused) {  // the serial fallback
    VPOD_RETURN_IF_ERROR(prefill(plan.attention(), buffers, q, kv, out, softmax_scale, stream));
    return decode(plan.attention(), buffers, q, kv, out, softmax_scale, stream);
  }
  VPOD_RETURN_IF_ERROR(validate_kv_view(kv, plan.attention()));
  VPOD_RETURN_IF_ERROR(check_counters(plan, counters, trace));
  const KvTensorMaps maps =
      plan.attention().kernel_options().tma ? contiguous_tensor_maps(kv) : KvTensorMaps{};
  return run_pod(plan, buffers, counters, q, out, softmax_scale, detail::contiguous_addressing(kv),
                 maps, stream, trace);
}

Status hybrid_attention(const PodPlan& plan, const AttentionBuffers& buffers,
                        const PodCounters& counters, const TensorView& q, const KvLayerView& kv,
                        const TensorView& out, float softmax_scale, cudaStream_t stream) {
  if (plan.mode() == AttentionMode::pod) {
    return pod(plan, buffers, counters, q, kv, out, softmax_scale, stream);
  }
  VPOD_RETURN_IF_ERROR(prefill(plan.attention(), buffers, q, kv, out, softmax_scale, stream));
  return decode(plan.attention(), buffers, q, kv, out, softmax_scale, stream);
}

}  // namespace vpod::attention
