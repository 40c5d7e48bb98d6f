// FlashInfer's FA3 single prefill, instantiated per dtype (fi_fa3_single_f16.cu,
// fi_fa3_single_bf16.cu) with the parameter struct FlashInfer's JIT would
// generate for DefaultAttention<no soft cap>.
#pragma once

#include <exception>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/cutlass_utils.cuh>
#include <string>

#include "bench/peers/fi_fa3_single.h"

namespace vpod::bench::peers {

template <typename DType>
struct Fa3SingleParams {
  using DTypeQ = DType;
  using DTypeKV = DType;
  using DTypeO = DType;
  using IdType = std::int32_t;

  DTypeQ* q_ptr;
  DTypeKV* k_ptr;
  DTypeKV* v_ptr;
  DTypeO* o_ptr;
  float* lse_ptr;

  struct AdditionalParams {
    float* maybe_scale_v;
    double logits_soft_cap;
    double sm_scale;
    double scale_v_scalar;
  } additional_params;

  std::int64_t q_stride_n;
  std::int64_t k_stride_n;
  std::int64_t v_stride_n;
  std::int64_t o_stride_n;
  std::int64_t q_stride_h;
  std::int64_t k_stride_h;
  std::int64_t v_stride_h;
  std::int64_t o_stride_h;

  int qo_len;
  int kv_len;
  int head_dim;
  int num_qo_heads;
  int num_kv_heads;
  int group_size;
  int window_left;

  bool causal;
};

// The error text, empty on success.
template <typename DType>
std::string run_fa3_single(const SinglePrefillArgs& a, cudaStream_t stream) {
  if (a.head_dim != 128) return "the FA3 single-prefill peer is built for head_dim 128";
  Fa3SingleParams<DType> p{};
  p.q_ptr = static_cast<DType*>(const_cast<void*>(a.q));
  p.k_ptr = static_cast<DType*>(const_cast<void*>(a.k));
  p.v_ptr = static_cast<DType*>(const_cast<void*>(a.v));
  p.o_ptr = static_cast<DType*>(a.o);
  p.lse_ptr = nullptr;
  p.additional_params.maybe_scale_v = nullptr;
  p.additional_params.sm_scale = a.sm_scale;
  p.additional_params.scale_v_scalar = 1.0;
  p.q_stride_n = a.q_stride_n;
  p.o_stride_n = a.q_stride_n;
  p.q_stride_h = a.head_dim;
  p.o_stride_h = a.head_dim;
  p.k_stride_n = a.kv_stride_n;
  p.v_stride_n = a.kv_stride_n;
  p.k_stride_h = a.head_dim;
  p.v_stride_h = a.head_dim;
  p.qo_len = a.qo_len;
  p.kv_len = a.kv_len;
  p.head_dim = a.head_dim;
  p.num_qo_heads = a.num_qo_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.group_size = a.num_qo_heads / a.num_kv_heads;
  p.window_left = -1;
  p.causal = true;
  try {
    const cudaError_t status =
        flashinfer::SinglePrefillWithKVCacheDispatched<128, 128, flashinfer::MaskMode::kCausal,
                                                       /*LEFT_SLIDING_WINDOW=*/false,
                                                       flashinfer::DefaultAttention<false>>(p,
                                                                                            stream);
    if (status != cudaSuccess) return cudaGetErrorString(status);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

std::string run_fa3_single_f16(const SinglePrefillArgs& a, cudaStream_t stream);
std::string run_fa3_single_bf16(const SinglePrefillArgs& a, cudaStream_t stream);

}  // namespace vpod::bench::peers
