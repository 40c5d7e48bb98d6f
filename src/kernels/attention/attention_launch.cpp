// The attention launchers: validate every input, fill the kernels' parameter
// structs from the plan, and enqueue (kernel, then combine when KV is split).
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "common/log.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_kernels.h"
#include "kernels/attention/attention_validate.h"
#include "kernels/attention/kv_tensor_map.h"

namespace vpod::attention {
namespace {

// cp.async and the 16-byte stores need 16-byte aligned rows.
constexpr std::int64_t kAlignElements = 8;
constexpr std::uintptr_t kAlignBytes = 16;

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kAlignBytes == 0; }

Status check_common_kv(const char* what, DType dtype, Device device, int num_kv_heads, int head_dim,
                       const void* k, const void* v, std::initializer_list<std::int64_t> strides,
                       const AttentionPlan& plan) {
  const AttentionDims& dims = plan.dims();
  if (device != Device::cuda) return invalid_argument(fmt::format("{} must be on cuda", what));
  if (dtype != dims.dtype) {
    return invalid_argument(fmt::format("{} is {} but the plan is for {}", what, dtype_name(dtype),
                                        dtype_name(dims.dtype)));
  }
  if (num_kv_heads != dims.num_kv_heads || head_dim != dims.head_dim) {
    return invalid_argument(fmt::format("{} has {} heads of dim {}; the plan needs {} of dim {}",
                                        what, num_kv_heads, head_dim, dims.num_kv_heads,
                                        dims.head_dim));
  }
  if (k == nullptr || v == nullptr)
    return invalid_argument(fmt::format("{} has a null K or V", what));
  if (!aligned(k) || !aligned(v)) {
    return invalid_argument(fmt::format("{} K/V must be 16-byte aligned", what));
  }
  for (std::int64_t s : strides) {
    if (s < 0 || s % kAlignElements != 0) {
      return invalid_argument(
          fmt::format("{} strides must be non-negative multiples of {} elements (16 bytes), got {}",
                      what, kAlignElements, s));
    }
  }
  return Status();
}

Status check_attention_inputs(const AttentionPlan& plan, const AttentionBuffers& buffers,
                              const TensorView& q, const TensorView& out, float softmax_scale) {
  VPOD_RETURN_IF_ERROR(validate_token_view("q", q, plan, plan.dims().num_q_heads));
  VPOD_RETURN_IF_ERROR(validate_token_view("out", out, plan, plan.dims().num_q_heads));
  VPOD_RETURN_IF_ERROR(validate_softmax_scale(softmax_scale));
  return validate_buffers(buffers, plan);
}

// `maps`: TMA descriptors of a contiguous cache (valid = 0: cp.async loads).
Status run_prefill(const AttentionPlan& plan, const AttentionBuffers& buffers, const TensorView& q,
                   const TensorView& out, float softmax_scale, const KvAddressing& kv,
                   const KvTensorMaps& maps, cudaStream_t stream) {
  if (plan.prefill_items().empty()) return Status();
  AttentionParams p = detail::make_params(plan, buffers, q, out, softmax_scale, kv);
  p.kv_tma = maps;
  // The warp-specialized kernel also loads Q by TMA (it needs both maps):
  // packed when every item packs, per item when some do (one map for each box).
  if (maps.valid != 0 && plan.kernel_options().ws_prefill) {
    const bool packing = plan.kernel_options().ws_gqa_pack;
    const int pack = packing ? plan.prefill_pack() : 1;
    const bool mixed = packing && plan.prefill_pack_mixed();
    Status encoded = encode_q_tensor_map(q, plan.num_tokens(), pack, p.q_tma);
    if (encoded.ok() && mixed) {
      encoded = encode_q_tensor_map(q, plan.num_tokens(), plan.dims().group_size(), p.q_tma_packed);
    }
    if (encoded.ok()) {
      p.q_tma_valid = 1;
      p.ws_pack = pack;
      p.ws_mixed = mixed ? 1 : 0;
      // The plan's walk (uniform or per item) unless the option turned packing off.
      p.ws_num_tiles = packing ? plan.ws_tiles() : p.num_prefill_items * p.num_q_heads;
    } else {
      // Said once per process: the one-warpgroup tile runs instead, slower.
      static std::once_flag said;
      std::call_once(said, [&] {
        VPOD_LOG_INFO("attention: no TMA descriptor for q, prefill on the wgmma tile: {}",
                      encoded.message());
      });
    }
  }
  // The warp-specialized kernel's tile order (measured in docs/attention.md):
  // head-major when the items cost alike (chunks over a long context: the
  // CTAs sharing a KV head then stream its K/V together); item-major, longest
  // first, otherwise (a causal prompt's tiles run from 1 to n blocks, and
  // that order balances the persistent CTAs).
  // (A walk packed per item is item-major.)
  p.ws_head_major =
      p.ws_mixed == 0 && (plan.kernel_options().ws_head_major || plan.prefill_items_cost_alike())
          ? 1
          : 0;
  const AttentionDims& dims = plan.dims();
  const KernelOptions& options = plan.kernel_options();
  VPOD_RETURN_IF_ERROR(dims.dtype == DType::f16
                           ? detail::launch_prefill_f16(p, options, dims.head_dim, stream)
                           : detail::launch_prefill_bf16(p, options, dims.head_dim, stream));
  const CombineParams c =
      detail::make_combine(p, plan, p.plan.prefill_combines, plan.prefill_combines().size());
  return detail::launch_combine(c, dims.dtype, dims.head_dim, stream);
}

Status run_decode(const AttentionPlan& plan, const AttentionBuffers& buffers, const TensorView& q,
                  const TensorView& out, float softmax_scale, const KvAddressing& kv,
                  cudaStream_t stream) {
  if (plan.decode_items().empty()) return Status();
  AttentionParams p = detail::make_params(plan, buffers, q, out, softmax_scale, kv);
  const AttentionDims& dims = plan.dims();
  // The decode kernel merges its own splits (decode_counters); the separate
  // combine kernel stays for comparison (KernelOptions::decode_merge_in_kernel).
  const bool combine_kernel = !plan.kernel_options().decode_merge_in_kernel;
  if (combine_kernel) p.plan.decode_counters = nullptr;
  // The splits merge inside their cluster (sm_90): no partial rows, no counters.
  const bool heads = plan.decode_kernel() == DecodeKernel::heads;
  if (plan.decode_cluster_size() > 0 && !combine_kernel &&
      (heads ? detail::decode_heads_cluster_supported(dims.dtype, dims.head_dim)
             : detail::decode_cluster_supported(dims.dtype, dims.head_dim))) {
    return heads ? detail::launch_decode_heads_cluster(p, dims.dtype, dims.head_dim,
                                                       plan.decode_cluster_size(), stream)
                 : detail::launch_decode_cluster(p, dims.dtype, dims.head_dim,
                                                 plan.decode_cluster_size(), stream);
  }
  if (plan.decode_kernel() == DecodeKernel::heads) {
    VPOD_RETURN_IF_ERROR(detail::launch_decode_heads(p, dims.dtype, dims.head_dim, stream));
  } else if (plan.decode_kernel() == DecodeKernel::tile_deep &&
             detail::decode_deep_supported(dims.dtype, dims.head_dim)) {
    VPOD_RETURN_IF_ERROR(detail::launch_decode_deep(p, dims.dtype, dims.head_dim, stream));
  } else {
    // The tile kernel; also a tile_deep plan where the device lacks the deep
    // kernel's shared memory (the same items, two CTAs per SM).
    VPOD_RETURN_IF_ERROR(dims.dtype == DType::f16
                             ? detail::launch_decode_f16(p, dims.head_dim, stream)
                             : detail::launch_decode_bf16(p, dims.head_dim, stream));
  }
  if (p.plan.decode_counters != nullptr) return Status();
  const CombineParams c =
      detail::make_combine(p, plan, p.plan.decode_combines, plan.decode_combines().size());
  return detail::launch_combine(c, dims.dtype, dims.head_dim, stream);
}

Status run_append(const AttentionPlan& plan, const AttentionBuffers& buffers,
                  const TensorView& k_new, const TensorView& v_new, const KvAddressing& kv,
                  cudaStream_t stream) {
  if (plan.num_tokens() == 0) return Status();
  const AttentionDims& dims = plan.dims();
  AppendParams p;
  p.k_new = k_new.data();
  p.v_new = v_new.data();
  p.k_new_token_stride = k_new.stride(0);
  p.v_new_token_stride = v_new.stride(0);
  p.token_slots = plan.pointers(buffers).token_slots;
  p.num_tokens = plan.num_tokens();
  p.num_kv_heads = dims.num_kv_heads;
  p.head_dim = dims.head_dim;
  p.element_bytes = static_cast<std::int32_t>(dtype_size(dims.dtype));
  p.kv = kv;
  return detail::launch_append(p, stream);
}

Status check_append_inputs(const AttentionPlan& plan, const AttentionBuffers& buffers,
                           const TensorView& k_new, const TensorView& v_new) {
  VPOD_RETURN_IF_ERROR(validate_token_view("k_new", k_new, plan, plan.dims().num_kv_heads));
  VPOD_RETURN_IF_ERROR(validate_token_view("v_new", v_new, plan, plan.dims().num_kv_heads));
  return validate_buffers(buffers, plan);
}

}  // namespace

Status validate_token_view(const char* name, const TensorView& view, const AttentionPlan& plan,
                           int heads) {
  const AttentionDims& dims = plan.dims();
  if (view.device() != Device::cuda)
    return invalid_argument(fmt::format("{} must be on cuda", name));
  if (view.dtype() != dims.dtype) {
    return invalid_argument(fmt::format("{} is {} but the plan is for {}", name,
                                        dtype_name(view.dtype()), dtype_name(dims.dtype)));
  }
  if (view.rank() != 3) {
    return invalid_argument(fmt::format("{} must be [tokens, {}, {}], got {}", name, heads,
                                        dims.head_dim, view.to_string()));
  }
  if (view.size(0) < plan.num_tokens() || view.size(1) != heads || view.size(2) != dims.head_dim) {
    return invalid_argument(fmt::format("{} must be [>= {}, {}, {}], got {}", name,
                                        plan.num_tokens(), heads, dims.head_dim, view.to_string()));
  }
  if (view.stride(2) != 1 || view.stride(1) != dims.head_dim) {
    return invalid_argument(
        fmt::format("{} must have contiguous heads (strides [*, {}, 1]), got {}", name,
                    dims.head_dim, view.to_string()));
  }
  if (view.stride(0) < static_cast<std::int64_t>(heads) * dims.head_dim ||
      view.stride(0) % kAlignElements != 0) {
    return invalid_argument(fmt::format(
        "{} token stride {} must be >= {} and a multiple of {} elements", name, view.stride(0),
        static_cast<std::int64_t>(heads) * dims.head_dim, kAlignElements));
  }
  if (plan.num_tokens() > 0 && (view.data() == nullptr || !aligned(view.data()))) {
    return invalid_argument(fmt::format("{} must be a non-null 16-byte aligned pointer", name));
  }
  return Status();
}

Status validate_kv_view(const KvLayerView& kv, const AttentionPlan& plan) {
  VPOD_RETURN_IF_ERROR(check_common_kv("kv", kv.dtype, kv.device, kv.num_kv_heads, kv.head_dim,
                                       kv.k, kv.v,
                                       {kv.slot_stride, kv.token_stride, kv.head_stride}, plan));
  if (plan.max_slot() >= kv.num_slots) {
    return out_of_range(fmt::format("the batch uses slot {} but the KV view has {} slots",
                                    plan.max_slot(), kv.num_slots));
  }
  if (plan.max_context_len() > kv.max_ctx) {
    return out_of_range(fmt::format("the batch reaches {} tokens but the KV view holds {} per slot",
                                    plan.max_context_len(), kv.max_ctx));
  }
  return Status();
}

Status validate_paged_kv_view(const PagedKvView& kv, const AttentionPlan& plan) {
  VPOD_RETURN_IF_ERROR(check_common_kv("paged kv", kv.dtype, kv.device, kv.num_kv_heads,
                                       kv.head_dim, kv.k, kv.v,
                                       {kv.block_stride, kv.token_stride, kv.head_stride}, plan));
  if (kv.block_size < 1 || !std::has_single_bit(static_cast<unsigned>(kv.block_size))) {
    return invalid_argument(
        fmt::format("paged kv block_size must be a power of two, got {}", kv.block_size));
  }
  if (kv.block_table == nullptr) return invalid_argument("paged kv has no block table");
  if (plan.max_slot() >= kv.num_slots) {
    return out_of_range(fmt::format("the batch uses block-table row {} but the table has {} rows",
                                    plan.max_slot(), kv.num_slots));
  }
  if (static_cast<std::int64_t>(kv.max_blocks_per_slot) * kv.block_size < plan.max_context_len()) {
    return out_of_range(
        fmt::format("the batch reaches {} tokens but a block-table row covers {} blocks of {}",
                    plan.max_context_len(), kv.max_blocks_per_slot, kv.block_size));
  }
  return Status();
}

Status validate_buffers(const AttentionBuffers& buffers, const AttentionPlan& plan) {
  if (plan.metadata_bytes() > 0 &&
      (buffers.metadata == nullptr || buffers.metadata_bytes < plan.metadata_bytes())) {
    return invalid_argument(fmt::format(
        "attention metadata buffer holds {} bytes; the plan needs {}",
        buffers.metadata == nullptr ? 0 : buffers.metadata_bytes, plan.metadata_bytes()));
  }
  if (plan.partial_rows() > 0 &&
      (buffers.workspace == nullptr || buffers.workspace_bytes < plan.workspace_bytes())) {
    return invalid_argument(fmt::format("attention workspace holds {} bytes; the plan needs {}",
                                        buffers.workspace == nullptr ? 0 : buffers.workspace_bytes,
                                        plan.workspace_bytes()));
  }
  return Status();
}

Status validate_softmax_scale(float softmax_scale) {
  if (!std::isfinite(softmax_scale) || softmax_scale <= 0.f) {
    return invalid_argument(
        fmt::format("softmax_scale must be finite and > 0, got {}", softmax_scale));
  }
  return Status();
}

Status append_kv(const AttentionPlan& plan, const AttentionBuffers& buffers,
                 const TensorView& k_new, const TensorView& v_new, const KvLayerView& kv,
                 cudaStream_t stream) {
  VPOD_RETURN_IF_ERROR(check_append_inputs(plan, buffers, k_new, v_new));
  VPOD_RETURN_IF_ERROR(validate_kv_view(kv, plan));
  return run_append(plan, buffers, k_new, v_new, detail::contiguous_addressing(kv), stream);
}

Status append_kv(const AttentionPlan& plan, const AttentionBuffers& buffers,
                 const TensorView& k_new, const TensorView& v_new, const PagedKvView& kv,
                 cudaStream_t stream) {
  VPOD_RETURN_IF_ERROR(check_append_inputs(plan, buffers, k_new, v_new));
  VPOD_RETURN_IF_ERROR(validate_paged_kv_view(kv, plan));
  return run_append(plan, buffers, k_new, v_new, detail::paged_addressing(kv), stream);
}

Status prefill(const AttentionPlan& plan, const AttentionBuffers& buffers, const TensorView& q,
               const KvLayerView& kv, const TensorView& out, float softmax_scale,
               cudaStream_t stream) {
  VPOD_RETURN_IF_ERROR(check_attention_inputs(plan, buffers, q, out, softmax_scale));
  VPOD_RETURN_IF_ERROR(validate_kv_view(kv, plan));
  return run_prefill(plan, buffers, q, out, softmax_scale, detail::contiguous_addressing(kv),
                     plan.kernel_options().tma ? contiguous_tensor_maps(kv) : KvTensorMaps{},
                     stream);
}

Status decode(const AttentionPlan& plan, const AttentionBuffers& buffers, const TensorView& q,
              const KvLayerView& kv, const TensorView& out, float softmax_scale,
              cudaStream_t stream) {
  VPOD_RETURN_IF_ERROR(check_attention_inputs(plan, buffers, q, out, softmax_scale));
  VPOD_RETURN_IF_ERROR(validate_kv_view(kv, plan));
  return run_decode(plan, buffers, q, out, softmax_scale, detail::contiguous_addressing(kv),
                    stream);
}

Result<DecodeClusterSlots> query_decode_cluster_slots(const AttentionDims& dims) {
  VPOD_RETURN_IF_ERROR(validate_dims(dims));
  DecodeClusterSlots slots{};
  if (!detail::decode_cluster_supported(dims.dtype, dims.head_dim)) return slots;
  for (int size = 2; size <= kMaxDecodeClusterSize; ++size) {
    VPOD_ASSIGN_OR_RETURN(const int clusters,
                          detail::decode_cluster_max_active(dims.dtype, dims.head_dim, size));
    slots[size] = clusters * size;
  }
  return slots;
}

Result<int> query_ws_prefill_ctas_per_sm(const AttentionDims& dims) {
  VPOD_RETURN_IF_ERROR(validate_dims(dims));
  return detail::ctas_per_sm(detail::KernelKind::prefill_ws, dims.dtype, dims.head_dim);
}

namespace detail {

KvAddressing contiguous_addressing(const KvLayerView& kv) {
  KvAddressing a;
  a.k = kv.k;
  a.v = kv.v;
  a.outer_stride = kv.slot_stride;
  a.token_stride = kv.token_stride;
  a.head_stride = kv.head_stride;
  return a;
}

KvAddressing paged_addressing(const PagedKvView& kv) {
  KvAddressing a;
  a.k = kv.k;
  a.v = kv.v;
  a.outer_stride = kv.block_stride;
  a.token_stride = kv.token_stride;
  a.head_stride = kv.head_stride;
  a.block_table = kv.block_table;
  a.block_table_stride = kv.max_blocks_per_slot;
  a.block_shift = std::countr_zero(static_cast<unsigned>(kv.block_size));
  return a;
}

AttentionParams make_params(const AttentionPlan& plan, const AttentionBuffers& buffers,
                            const TensorView& q, const TensorView& out, float softmax_scale,
                            const KvAddressing& kv) {
  const AttentionDims& dims = plan.dims();
  AttentionParams p;
  p.q = q.data();
  p.q_token_stride = q.stride(0);
  p.out = out.data();
  p.out_token_stride = out.stride(0);
  p.kv = kv;
  p.num_q_heads = dims.num_q_heads;
  p.num_kv_heads = dims.num_kv_heads;
  p.group_size = dims.group_size();
  p.decode_head_chunks = plan.decode_head_chunks();
  p.scale_log2 = static_cast<float>(softmax_scale * 1.4426950408889634);  // * log2(e)
  p.num_prefill_items = static_cast<std::int32_t>(plan.prefill_items().size());
  p.num_decode_items = static_cast<std::int32_t>(plan.decode_items().size());
  p.plan = plan.pointers(buffers);
  // The running max's slack (docs/attention.md, *The lazy running max*).
  p.max_slack = plan.kernel_options().lazy_max ? kMaxSlack : 0.f;
  return p;
}

CombineParams make_combine(const AttentionParams& p, const AttentionPlan& plan,
                           const CombineItem* items, std::size_t count) {
  CombineParams c;
  c.items = items;
  c.num_items = static_cast<std::int32_t>(count);
  c.partial_o = p.plan.partial_o;
  c.partial_lse = p.plan.partial_lse;
  c.out = p.out;
  c.out_token_stride = p.out_token_stride;
  c.num_q_heads = p.num_q_heads;
  c.head_dim = plan.dims().head_dim;
  return c;
}

}  // namespace detail

}  // namespace vpod::attention
