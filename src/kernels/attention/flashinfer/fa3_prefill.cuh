// FlashInfer's FA3 (sm_90a) batch prefill over a paged KV cache, causal,
// head_dim 128: the parameter struct FlashInfer's JIT would generate for
// DefaultAttention<no soft cap>, and the launcher each dtype's unit
// instantiates (fa3_prefill_f16.cu, fa3_prefill_bf16.cu).
#pragma once

#include <exception>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/cutlass_utils.cuh>

#include "kernels/attention/flashinfer/fi_args.h"

namespace vpod::attention::fi {

// The fields FlashInfer's batch_prefill_sm90_customize_config.jinja declares
// for PagedParams, with the additional parameters of DefaultAttention<false>
// (batch_prefill fa3 module, non-fp8).
template <typename DType>
struct Fa3PagedParams {
  using DTypeQ = DType;
  using DTypeKV = DType;
  using DTypeO = DType;
  using IdType = std::int32_t;

  DTypeQ* q_ptr;
  DTypeKV* k_ptr;
  DTypeKV* v_ptr;
  DTypeO* o_ptr;
  float* lse_ptr;

  IdType* qo_tile_indices;
  IdType* qo_indptr;
  IdType* kv_indptr;
  IdType* kv_indices;
  IdType* qo_lens;
  IdType* kv_lens;
  IdType* head_indices;
  IdType* work_indptr;
  IdType* batch_indices;

  struct AdditionalParams {
    std::uint32_t* maybe_prefix_len_ptr;
    std::uint16_t* maybe_token_pos_in_items_ptr;
    std::uint16_t* maybe_max_item_len_ptr;
    float* maybe_scale_v;
    double logits_soft_cap;
    double sm_scale;
    double scale_v_scalar;
    std::int64_t token_pos_in_items_len;
  } additional_params;

  std::int64_t q_stride_n;
  std::int64_t k_stride_n;
  std::int64_t v_stride_n;
  std::int64_t o_stride_n;
  std::int64_t q_stride_h;
  std::int64_t k_stride_h;
  std::int64_t v_stride_h;
  std::int64_t o_stride_h;
  std::int64_t nnz_qo;
  std::int64_t k_page_stride;
  std::int64_t v_page_stride;

  int head_dim;
  int num_qo_heads;
  int num_kv_heads;
  int group_size;
  int page_size;
  int window_left;

  bool causal;
};

inline constexpr std::uint32_t kFa3HeadDim = 128;

template <typename DType>
std::string run_fa3_prefill(const RunArgs& a) {
  using Params = Fa3PagedParams<DType>;
  using flashinfer::GetPtrFromBaseOffset;
  if (a.head_dim != static_cast<int>(kFa3HeadDim)) return "FA3 prefill is built for head_dim 128";
  flashinfer::PrefillPlanSM90Info info;
  info.FromVector(std::vector<std::int64_t>(a.plan_info, a.plan_info + 9));
  if (info.same_schedule_for_all_heads) {
    // Only past 4096 query tiles per head (over 500K rows); not instantiated.
    return "FA3 prefill: the step is too large for the instantiated schedule";
  }
  Params p{};
  p.q_ptr = static_cast<DType*>(a.q);
  p.k_ptr = static_cast<DType*>(a.kv.k);
  p.v_ptr = static_cast<DType*>(a.kv.v);
  p.o_ptr = static_cast<DType*>(a.o);
  p.lse_ptr = nullptr;
  p.q_stride_n = a.q_stride_n;
  p.q_stride_h = a.q_stride_h;
  p.o_stride_n = a.o_stride_n;
  p.o_stride_h = a.o_stride_h;
  p.k_stride_n = a.kv.token_stride;
  p.k_stride_h = a.kv.head_stride;
  p.v_stride_n = a.kv.token_stride;
  p.v_stride_h = a.kv.head_stride;
  p.k_page_stride = a.kv.page_stride;
  p.v_page_stride = a.kv.page_stride;
  p.nnz_qo = a.num_rows;
  p.head_dim = a.head_dim;
  p.num_qo_heads = a.num_qo_heads;
  p.num_kv_heads = a.kv.num_kv_heads;
  p.group_size = a.num_qo_heads / a.kv.num_kv_heads;
  p.page_size = a.kv.page_size;
  p.window_left = -1;
  p.causal = true;
  void* ib = a.int_workspace;
  p.qo_tile_indices = GetPtrFromBaseOffset<std::int32_t>(ib, info.qo_tile_indices_offset);
  p.qo_indptr = GetPtrFromBaseOffset<std::int32_t>(ib, info.qo_indptr_offset);
  p.kv_indptr = GetPtrFromBaseOffset<std::int32_t>(ib, info.kv_indptr_offset);
  p.qo_lens = GetPtrFromBaseOffset<std::int32_t>(ib, info.qo_len_offset);
  p.kv_lens = GetPtrFromBaseOffset<std::int32_t>(ib, info.kv_len_offset);
  p.head_indices = GetPtrFromBaseOffset<std::int32_t>(ib, info.head_indices_offset);
  p.work_indptr = GetPtrFromBaseOffset<std::int32_t>(ib, info.work_indptr_offset);
  p.batch_indices = GetPtrFromBaseOffset<std::int32_t>(ib, info.batch_indices_offset);
  p.kv_indices = a.kv.indices;
  p.additional_params.sm_scale = a.sm_scale;
  p.additional_params.scale_v_scalar = 1.0;
  try {
    const cudaError_t status = flashinfer::BatchPrefillWithPagedKVCacheDispatched<
        kFa3HeadDim, kFa3HeadDim, flashinfer::MaskMode::kCausal, /*LEFT_SLIDING_WINDOW=*/false,
        /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false, flashinfer::DefaultAttention<false>, Params>(
        p, /*enable_pdl=*/false, a.stream);
    if (status != cudaSuccess) return cudaGetErrorString(status);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace vpod::attention::fi
