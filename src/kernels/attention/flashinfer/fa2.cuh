// FlashInfer's FA2 batch prefill over a paged KV cache (attention/prefill.cuh),
// head_dim 128, DefaultAttention without custom mask, window, soft cap or
// ALiBi: the kernel FlashInfer runs for paged prefill on sm_80 and, with one
// query row per sequence and no mask, for BatchDecodeWithPagedKVCacheWrapper
// (use_tensor_cores=True) on every architecture. Each dtype's units instantiate
// the query tiles they need (fa2_prefill_*.cu, fa2_decode_*.cu).
#pragma once

#include <exception>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "kernels/attention/flashinfer/fi_args.h"

namespace vpod::attention::fi {

inline constexpr std::uint32_t kFa2HeadDim = 128;

template <typename DType>
using Fa2PagedParams = flashinfer::BatchPrefillPagedParams<DType, DType, DType, std::int32_t>;
using Fa2Variant = flashinfer::DefaultAttention</*use_custom_mask=*/false, /*sliding=*/false,
                                                /*soft_cap=*/false, /*alibi=*/false>;

template <typename DType, flashinfer::MaskMode kMask, std::uint32_t kCtaTileQ>
cudaError_t launch_fa2(Fa2PagedParams<DType>& p, DType* tmp_v, float* tmp_s, cudaStream_t stream) {
  return flashinfer::BatchPrefillWithPagedKVCacheDispatched<
      /*SAME_KV_STRIDES=*/true, kCtaTileQ, kFa2HeadDim, kFa2HeadDim,
      flashinfer::PosEncodingMode::kNone, /*USE_FP16_QK_REDUCTION=*/false, kMask, Fa2Variant>(
      p, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
}

// One planned FA2 launch: FlashInfer's parameters filled from the plan, the
// split partials (null when the plan does not split KV) and the query tile
// the plan chose.
template <typename DType>
struct Fa2Launch {
  Fa2PagedParams<DType> params;
  DType* tmp_v = nullptr;
  float* tmp_s = nullptr;
  int cta_tile_q = 0;
};

// Fills `launch` from the arguments and their plan info; "" or the error.
template <typename DType>
std::string make_fa2_launch(const RunArgs& a, Fa2Launch<DType>& launch) {
  using flashinfer::GetPtrFromBaseOffset;
  if (a.head_dim != static_cast<int>(kFa2HeadDim)) return "FA2 is built for head_dim 128";
  if (a.o_stride_h != a.head_dim ||
      a.o_stride_n != static_cast<std::int64_t>(a.num_qo_heads) * a.head_dim) {
    return "FA2 writes a contiguous [rows, heads, head_dim] output";
  }
  flashinfer::PrefillPlanInfo info;
  info.FromVector(std::vector<std::int64_t>(a.plan_info, a.plan_info + 15));
  const std::int64_t strides[3] = {a.kv.page_stride, a.kv.token_stride, a.kv.head_stride};
  flashinfer::paged_kv_t<DType, std::int32_t> kv(
      static_cast<std::uint32_t>(a.kv.num_kv_heads), static_cast<std::uint32_t>(a.kv.page_size),
      static_cast<std::uint32_t>(a.head_dim), static_cast<std::uint32_t>(a.batch_size),
      flashinfer::QKVLayout::kNHD, static_cast<DType*>(a.kv.k), static_cast<DType*>(a.kv.v),
      strides, a.kv.indices, a.kv.indptr, a.kv.last_page_len);
  Fa2PagedParams<DType>& p = launch.params;
  p = Fa2PagedParams<DType>(static_cast<DType*>(a.q), kv, /*maybe_custom_mask=*/nullptr,
                            a.qo_indptr, /*maybe_mask_indptr=*/nullptr,
                            /*maybe_q_rope_offset=*/nullptr, static_cast<DType*>(a.o),
                            /*lse=*/nullptr, /*maybe_alibi_slopes=*/nullptr,
                            static_cast<std::uint32_t>(a.num_qo_heads),
                            static_cast<std::int32_t>(a.q_stride_n),
                            static_cast<std::int32_t>(a.q_stride_h), /*window_left=*/-1,
                            /*logits_soft_cap=*/0.0f, a.sm_scale, /*rope_scale=*/1.0f,
                            /*rope_theta=*/1e4f);
  void* ib = a.int_workspace;
  p.request_indices = GetPtrFromBaseOffset<std::int32_t>(ib, info.request_indices_offset);
  p.qo_tile_indices = GetPtrFromBaseOffset<std::int32_t>(ib, info.qo_tile_indices_offset);
  p.kv_tile_indices = GetPtrFromBaseOffset<std::int32_t>(ib, info.kv_tile_indices_offset);
  p.o_indptr = GetPtrFromBaseOffset<std::int32_t>(ib, info.o_indptr_offset);
  p.kv_chunk_size_ptr = GetPtrFromBaseOffset<std::int32_t>(ib, info.kv_chunk_size_ptr_offset);
  launch.tmp_v = nullptr;
  launch.tmp_s = nullptr;
  if (info.split_kv) {
    p.merge_indptr = GetPtrFromBaseOffset<std::int32_t>(ib, info.merge_indptr_offset);
    launch.tmp_v = GetPtrFromBaseOffset<DType>(a.float_workspace, info.v_offset);
    launch.tmp_s = GetPtrFromBaseOffset<float>(a.float_workspace, info.s_offset);
  }
  p.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
  p.max_total_num_rows = static_cast<std::uint32_t>(info.total_num_rows);
  if (info.enable_cuda_graph) {
    p.block_valid_mask = GetPtrFromBaseOffset<bool>(ib, info.block_valid_mask_offset);
    p.total_num_rows = GetPtrFromBaseOffset<std::uint32_t>(ib, info.total_num_rows_offset);
  }
  launch.cta_tile_q = static_cast<int>(info.cta_tile_q);
  return {};
}

// Builds the parameters from the plan and launches the tile the plan chose;
// `Launch(cta_tile_q, params, tmp_v, tmp_s, status)` returns false for a tile
// this unit did not instantiate.
template <typename DType, typename Launch>
std::string run_fa2(const RunArgs& a, Launch&& launch) {
  Fa2Launch<DType> l;
  if (std::string error = make_fa2_launch(a, l); !error.empty()) return error;
  try {
    cudaError_t status = cudaSuccess;
    if (!launch(l.cta_tile_q, l.params, l.tmp_v, l.tmp_s, status)) {
      return "FA2: query tile " + std::to_string(l.cta_tile_q) + " is not instantiated here";
    }
    if (status != cudaSuccess) return cudaGetErrorString(status);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace vpod::attention::fi
