// FlashInfer's POD-Attention (attention/batch_pod.cuh,
// BatchPODWithPagedKVCacheWrapper): the prefill chunks (causal) and the
// decodes of a hybrid batch in one launch of its FA2-based fused kernel, whose
// 128-thread CTAs pick prefill or decode work by SM-aware ticket. Both halves
// are FA2 batch prefills over the paged cache, planned by FlashInfer's
// PrefillPlan (the prefill's with the decode's CTAs set aside, as the
// wrapper plans it); decodes use the 16-row query tile.
//
// FlashInfer's own launcher (BatchPODWithKVCacheTensorDispatched) dispatches
// NUM_MMA_KV of both halves at run time, 16 kernels per query tile; this one
// instantiates the kernel for the NUM_MMA_KV FlashInfer picks on 164-228 KB
// of shared memory per SM (A100, H100/H200: the same values) and refuses a
// device where FlashInfer would pick others (pod_num_mma_kv). The launch,
// the scheduler reset and the split merges are FlashInfer's sequence.
#pragma once

#include <flashinfer/attention/batch_pod.cuh>
#include <flashinfer/attention/cascade.cuh>

#include "kernels/attention/flashinfer/fa2.cuh"

namespace vpod::attention::fi {

// FlashInfer's NUM_MMA_KV for a query tile of its POD kernel (batch_pod.cuh's
// dispatch, head_dim 128, 16-bit K/V, no RoPE, fp32 QK accumulation).
constexpr std::uint32_t pod_num_mma_kv(std::uint32_t cta_tile_q, int smem_per_sm) {
  constexpr std::size_t kRowBytes = 16 * kFa2HeadDim * 2;
  const int ctas_per_sm = static_cast<std::size_t>(smem_per_sm) > kRowBytes * 16 ? 2 : 1;
  const int per_cta = smem_per_sm / ctas_per_sm;
  const std::uint32_t mma_q = flashinfer::get_num_mma_q(cta_tile_q);
  const std::uint32_t warps_q = flashinfer::get_num_warps_q(cta_tile_q);
  const std::uint32_t warps_kv = flashinfer::get_num_warps_kv(cta_tile_q);
  const std::uint32_t by_regs = 8 / mma_q;
  const std::uint32_t by_smem = static_cast<std::uint32_t>(
      (static_cast<std::size_t>(per_cta) / kRowBytes - mma_q * warps_q) / (2 * warps_kv));
  const std::uint32_t m = by_regs < by_smem ? by_regs : by_smem;
  return m >= 8 ? 8 : m >= 4 ? 4 : m >= 2 ? 2 : m >= 1 ? 1 : 0;
}

// The value this unit instantiates: H200's 228 KB per SM (A100's 164 KB gives
// the same).
inline constexpr int kPodSmemPerSm = 228 * 1024;
static_assert(pod_num_mma_kv(128, kPodSmemPerSm) == pod_num_mma_kv(128, 164 * 1024));
static_assert(pod_num_mma_kv(64, kPodSmemPerSm) == pod_num_mma_kv(64, 164 * 1024));
static_assert(pod_num_mma_kv(16, kPodSmemPerSm) == pod_num_mma_kv(16, 164 * 1024));

template <typename DType, flashinfer::MaskMode kMask, std::uint32_t kTileQ>
using PodTraits = flashinfer::KernelTraits<
    kMask, kTileQ, flashinfer::get_num_mma_q(kTileQ), pod_num_mma_kv(kTileQ, kPodSmemPerSm),
    kFa2HeadDim / 16, kFa2HeadDim / 16, flashinfer::get_num_warps_q(kTileQ),
    flashinfer::get_num_warps_kv(kTileQ), flashinfer::PosEncodingMode::kNone, DType, DType, DType,
    float, std::int32_t, Fa2Variant>;

// Merges one half's KV splits into `out`, the half's output (FlashInfer's
// merge after a split launch); nothing to do when the plan did not split.
template <typename DType>
cudaError_t merge_pod_splits(const Fa2Launch<DType>& l, DType* out, int num_qo_heads,
                             cudaStream_t stream) {
  if (l.tmp_v == nullptr) return cudaSuccess;
  return flashinfer::VariableLengthMergeStates(
      l.tmp_v, l.tmp_s, l.params.merge_indptr, out, /*s_merged=*/static_cast<float*>(nullptr),
      l.params.max_total_num_rows, l.params.total_num_rows,
      static_cast<std::uint32_t>(num_qo_heads), kFa2HeadDim, /*enable_pdl=*/false, stream);
}

template <typename DType, std::uint32_t kTileP>
cudaError_t launch_pod(Fa2Launch<DType> p, Fa2Launch<DType> d, std::int32_t* sched,
                       int num_qo_heads, int num_kv_heads, cudaStream_t stream) {
  using TraitsP = PodTraits<DType, flashinfer::MaskMode::kCausal, kTileP>;
  using TraitsD = PodTraits<DType, flashinfer::MaskMode::kNone, std::uint32_t{kPodDecodeTileQ}>;
  static_assert(!TraitsP::IsInvalid() && !TraitsD::IsInvalid());
  static_assert(TraitsP::NUM_THREADS == TraitsD::NUM_THREADS, "both halves run 4-warp CTAs");
  DType* const out_p = p.params.o;
  DType* const out_d = d.params.o;
  for (Fa2Launch<DType>* half : {&p, &d}) {
    half->params.partition_kv = half->tmp_v != nullptr;
    if (half->tmp_v != nullptr) {
      half->params.o = half->tmp_v;
      half->params.lse = half->tmp_s;
    }
  }
  auto kernel = flashinfer::BatchPODWithKVCacheTensorKernel<TraitsP, TraitsD, Fa2PagedParams<DType>,
                                                            Fa2PagedParams<DType>>;
  const std::size_t smem =
      std::max(sizeof(typename TraitsP::SharedStorage), sizeof(typename TraitsD::SharedStorage));
  const int grid = static_cast<int>((p.params.padded_batch_size + d.params.padded_batch_size) *
                                    static_cast<std::uint32_t>(num_kv_heads));
  cudaError_t status = cudaMemsetAsync(sched, 0, sizeof(std::int32_t) * kPodSchedInts, stream);
  if (status != cudaSuccess) return status;
  status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem));
  if (status != cudaSuccess) return status;
  kernel<<<grid, TraitsP::NUM_THREADS, smem, stream>>>(p.params, d.params, sched);
  status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  status = merge_pod_splits(p, out_p, num_qo_heads, stream);
  if (status != cudaSuccess) return status;
  return merge_pod_splits(d, out_d, num_qo_heads, stream);
}

// Runs the fused launch for `prefill` and `decode` (each planned by
// plan_fa2, the decode with query tile 16); "" or the error.
template <typename DType>
std::string run_fa2_pod(const RunArgs& prefill, const RunArgs& decode, std::int32_t* sched) {
  int device = 0, smem_per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) !=
          cudaSuccess) {
    return "cannot query the device's shared memory";
  }
  Fa2Launch<DType> p, d;
  if (std::string e = make_fa2_launch(prefill, p); !e.empty()) return e;
  if (std::string e = make_fa2_launch(decode, d); !e.empty()) return e;
  if (d.cta_tile_q != kPodDecodeTileQ) {
    return "POD's decode half runs the 16-row query tile, the plan chose " +
           std::to_string(d.cta_tile_q);
  }
  for (std::uint32_t tile : {16u, 64u, 128u, std::uint32_t{kPodDecodeTileQ}}) {
    if (pod_num_mma_kv(tile, smem_per_sm) != pod_num_mma_kv(tile, kPodSmemPerSm)) {
      return "FlashInfer's POD kernel would pick another KV tile on this GPU's " +
             std::to_string(smem_per_sm / 1024) + " KB of shared memory per SM than the one " +
             "built (for 164-228 KB)";
    }
  }
  try {
    cudaError_t status = cudaSuccess;
    const int heads = prefill.num_qo_heads;
    const int kv_heads = prefill.kv.num_kv_heads;
    switch (p.cta_tile_q) {
      case 16: status = launch_pod<DType, 16>(p, d, sched, heads, kv_heads, prefill.stream); break;
      case 64: status = launch_pod<DType, 64>(p, d, sched, heads, kv_heads, prefill.stream); break;
      case 128:
        status = launch_pod<DType, 128>(p, d, sched, heads, kv_heads, prefill.stream);
        break;
      default:
        return "FA2 POD: prefill query tile " + std::to_string(p.cta_tile_q) + " is not built";
    }
    if (status != cudaSuccess) return cudaGetErrorString(status);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace vpod::attention::fi
