// The fused POD kernel: one launch whose 128-thread CTAs run either a prefill
// tile or a decode tile (the decode kernel's 4-warp DecodeTile), chosen at run
// time by SM-aware scheduling. The prefill tile is the standalone prefill kernel's own device
// function: on sm_90a the wgmma tile (run_prefill_wgmma_tile, one warpgroup),
// elsewhere (or forced) the mma.sync PrefillTile; kWgmma picks the variant.
// The decode tiles are the decode kernel's own (decode_tile.cuh). A CTA runs
// exactly one tile, so a tile's __syncthreads is never shared with another
// tile, and the last split of a split decode merges the group
// (merge_decode_splits, the decode kernel's self-resetting arrival counters),
// so no combine launch follows for the decodes. Scheduling:
//   1. thread 0 reads %smid and draws a ticket from that SM's counter (an SM
//      id beyond the table, which is sized from %nsmid, uses a shared one);
//   2. the ticket picks the kind: proportional to the prefill and decode CTA
//      counts (ticket t is prefill when ceil((t+1) P / N) > ceil(t P / N),
//      N = P + D: ticket 0 of every SM is prefill), or alternating (50:50);
//      a kind with no CTAs is never picked;
//   3. it takes the next tile of that kind from the kind's counter, and the
//      other kind's when that one is exhausted. The grid has exactly P + D
//      CTAs, so every CTA gets exactly one unit and every unit runs once: if
//      both kinds were exhausted for a CTA, P + D others would hold units;
//   4. it counts itself done; the last CTA to get there zeroes every counter
//      for the next launch (no memset, graph-capturable).
// What a tile computes depends only on its index, never on where or when it
// runs, so the output is the same for any placement.
#pragma once

#include <string>

#include "common/cuda_check.h"
#include "kernels/attention/attention_kernels.cuh"
#include "kernels/attention/decode_tile.cuh"
#include "kernels/attention/pod_params.h"

namespace vpod::attention::device {

constexpr int pod_max(int a, int b) { return a > b ? a : b; }

// Shared memory of the fused kernel: the larger of its two tiles.
template <typename T, int kHeadDim, bool kWgmma>
inline constexpr int kPodSmemBytes = pod_max(kWgmma ? PrefillWgmmaTile<T, kHeadDim>::kSmemBytes
                                                    : PrefillTile<T, kHeadDim>::kSmemBytes,
                                             DecodeTile<T, kHeadDim>::kSmemBytes);

__device__ __forceinline__ unsigned read_smid() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

__device__ __forceinline__ unsigned read_nsmid() {
  unsigned n;
  asm volatile("mov.u32 %0, %%nsmid;\n" : "=r"(n));
  return n;
}

template <typename T, int kHeadDim, bool kWgmma>
__device__ __forceinline__ void pod_cta(const PodParams& params, const WgmmaKnobs& knobs,
                                        char* smem) {
  __shared__ int role[2];  // kind, unit
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    std::uint32_t* counters = params.counters;
    const unsigned smid = read_smid();
    const unsigned ticket = smid < static_cast<unsigned>(params.num_sm_counters)
                                ? atomicAdd(counters + kPodCounterHeader + smid, 1u)
                                : atomicAdd(counters + kPodCounterFallback, 1u);
    const int total[2] = {params.prefill_ctas, params.decode_ctas};
    int kind = pod_ticket_kind(ticket, total[0], total[1], params.ratio_even != 0);
    unsigned unit = atomicAdd(counters + (kind == 0 ? kPodCounterPrefill : kPodCounterDecode), 1u);
    if (unit >= static_cast<unsigned>(total[kind])) {  // this kind is exhausted: switch
      kind ^= 1;
      unit = atomicAdd(counters + (kind == 0 ? kPodCounterPrefill : kPodCounterDecode), 1u);
      if (unit >= static_cast<unsigned>(total[kind])) kind = -1;  // impossible (see above)
    }
    __threadfence();  // the claims above happen before this CTA counts as done
    const unsigned done = atomicAdd(counters + kPodCounterDone, 1u);
    if (done == gridDim.x - 1) {
      // Every CTA has claimed its unit: nobody reads the counters again in
      // this launch. Zero them for the next one (stream order publishes it).
      __threadfence();
      for (int i = 0; i < params.num_sm_counters; ++i) counters[kPodCounterHeader + i] = 0u;
      counters[kPodCounterPrefill] = 0u;
      counters[kPodCounterDecode] = 0u;
      counters[kPodCounterFallback] = 0u;
      counters[kPodCounterDone] = 0u;
    }
    if (params.trace != nullptr) {
      params.trace[3 * blockIdx.x] = kind;
      params.trace[3 * blockIdx.x + 1] = static_cast<int>(unit);
      params.trace[3 * blockIdx.x + 2] = static_cast<int>(smid);
    }
    role[0] = kind;
    role[1] = static_cast<int>(unit);
  }
  __syncthreads();
  const int kind = role[0];
  const int unit = role[1];
  const AttentionParams& p = params.attn;
  if (kind == 0) {
    if constexpr (kWgmma) {
      // The item in registers, as the standalone wgmma kernel holds it.
      const PrefillWorkItem item = p.plan.prefill_items[unit / p.num_q_heads];
      run_prefill_wgmma_tile<T, kHeadDim>(p, item, unit % p.num_q_heads, smem, tid, knobs);
    } else {
      // Read in place: a register copy costs the mma.sync tile (~254
      // registers) 88 more bytes of spills on sm_80.
      (void)knobs;
      PrefillTile<T, kHeadDim>::run(p, p.plan.prefill_items[unit / p.num_q_heads],
                                    unit % p.num_q_heads, smem, tid);
    }
  } else if (kind == 1) {
    const int per_item = p.num_kv_heads * p.decode_head_chunks;
    const int in_item = unit % per_item;
    const DecodeWorkItem item = p.plan.decode_items[unit / per_item];
    const int kv_head = in_item / p.decode_head_chunks;
    const int chunk = in_item % p.decode_head_chunks;
    DecodeTile<T, kHeadDim>::run(p, item, kv_head, chunk, smem, tid);
    // A split decode: the group's last split merges it (the whole CTA is
    // this one tile, so the merge's __syncthreads are its own).
    if (p.plan.decode_counters != nullptr && item.combine >= 0) {
      merge_decode_splits<T, kHeadDim>(p, item.combine, kv_head, chunk, tid);
    }
  }
}

template <typename T, int kHeadDim, bool kWgmma>
__global__ void __launch_bounds__(kAttentionThreads, 2)
    pod_kernel(const __grid_constant__ PodParams params, const WgmmaKnobs knobs) {
  extern __shared__ __align__(128) char smem[];
  if constexpr (kWgmma) {
#ifdef VPOD_ATTENTION_HAVE_WGMMA
    pod_cta<T, kHeadDim, true>(params, knobs, smem);
#else
    (void)params, (void)knobs;
    __trap();  // the launcher never selects this variant without sm_90a code
#endif
  } else {
    pod_cta<T, kHeadDim, false>(params, knobs, smem);
  }
}

// Whether the device runs the wgmma variant's sm_90a code (binary and PTX
// version 9.0; anything else would trap).
template <typename T, int kHeadDim>
bool pod_wgmma_runs_here() {
  static const bool runs = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, pod_kernel<T, kHeadDim, true>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90 && attr.ptxVersion == 90;
  }();
  return runs;
}

template <typename T, int kHeadDim, bool kWgmma>
Status launch_pod_variant(const PodParams& params, const KernelOptions& options,
                          cudaStream_t stream) {
  constexpr int smem = kPodSmemBytes<T, kHeadDim, kWgmma>;
  auto* kernel = pod_kernel<T, kHeadDim, kWgmma>;
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
      StatusCode::internal);
  const unsigned grid = static_cast<unsigned>(params.prefill_ctas + params.decode_ctas);
  kernel<<<grid, kAttentionThreads, smem, stream>>>(params, wgmma_knobs(options));
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  return Status();
}

template <typename T, int kHeadDim, bool kWgmma>
Result<int> pod_variant_ctas_per_sm() {
  int ctas = 0;
  constexpr int smem = kPodSmemBytes<T, kHeadDim, kWgmma>;
  auto* kernel = pod_kernel<T, kHeadDim, kWgmma>;
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
      StatusCode::internal);
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kAttentionThreads, smem),
      StatusCode::internal);
  return ctas;
}

template <typename T>
Status launch_pod_typed(const PodParams& params, const KernelOptions& options, int head_dim,
                        cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (params.wgmma_prefill != 0) {
      if (!pod_wgmma_runs_here<T, kHeadDim>()) {
        return failed_precondition(
            "the POD plan asks for the wgmma prefill tile; this GPU does not run its sm_90a code");
      }
      return launch_pod_variant<T, kHeadDim, true>(params, options, stream);
    }
    return launch_pod_variant<T, kHeadDim, false>(params, options, stream);
  });
  return Status();
}

template <typename T>
Result<int> pod_ctas_per_sm_typed(int head_dim, bool wgmma) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (wgmma) return pod_variant_ctas_per_sm<T, kHeadDim, true>();
    return pod_variant_ctas_per_sm<T, kHeadDim, false>();
  });
  return 0;
}

template <typename T>
Result<bool> pod_wgmma_runs_here_typed(int head_dim) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim,
                                   { return pod_wgmma_runs_here<T, kHeadDim>(); });
  return false;
}

}  // namespace vpod::attention::device
