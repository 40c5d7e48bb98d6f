// The fused POD kernel: one launch whose CTAs run either a prefill tile
// (PrefillTile, 128 threads) or a decode CTA (one 4-warp DecodeTile, or two
// 2-warp VirtualDecodeTiles side by side), chosen at run time by SM-aware
// scheduling:
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
#include "kernels/attention/pod_decode_tile.cuh"
#include "kernels/attention/pod_params.h"

namespace vpod::attention::device {

constexpr int pod_max(int a, int b) { return a > b ? a : b; }

// Shared memory of the fused kernel for 1 or 2 decode tiles per CTA.
template <typename T, int kHeadDim>
constexpr int pod_smem_bytes(int virtual_decode) {
  return pod_max(PrefillTile<T, kHeadDim>::kSmemBytes,
                 virtual_decode == 2 ? 2 * VirtualDecodeTile<T, kHeadDim, 2>::kSmemBytes
                                     : DecodeTile<T, kHeadDim>::kSmemBytes);
}
template <typename T, int kHeadDim>
inline constexpr int kPodMaxSmemBytes = pod_max(pod_smem_bytes<T, kHeadDim>(1),
                                                pod_smem_bytes<T, kHeadDim>(2));

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

// Kind of ticket t (0 prefill, 1 decode) for P prefill and D decode CTAs.
__device__ __forceinline__ int ticket_kind(unsigned ticket, int prefill, int decode, bool even) {
  if (prefill == 0) return 1;
  if (decode == 0) return 0;
  if (even) return static_cast<int>(ticket & 1u);  // prefill first
  // Ticket t is prefill when ceil((t+1) P / N) > ceil(t P / N): P of every N
  // tickets, spread evenly, ticket 0 prefill (the long prefill CTAs start first).
  const unsigned long long total = static_cast<unsigned long long>(prefill) + decode;
  const unsigned long long t = ticket;
  const bool prefill_turn =
      ((t + 1) * prefill + total - 1) / total > (t * prefill + total - 1) / total;
  return prefill_turn ? 0 : 1;
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, 2)
    pod_kernel(const __grid_constant__ PodParams params) {
  extern __shared__ __align__(128) char smem[];
  __shared__ int role[2];  // kind, unit
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    std::uint32_t* counters = params.counters;
    const unsigned smid = read_smid();
    const unsigned ticket = smid < static_cast<unsigned>(params.num_sm_counters)
                                ? atomicAdd(counters + kPodCounterHeader + smid, 1u)
                                : atomicAdd(counters + kPodCounterFallback, 1u);
    const int total[2] = {params.prefill_ctas, params.decode_ctas};
    int kind = ticket_kind(ticket, total[0], total[1], params.ratio_even != 0);
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
    PrefillTile<T, kHeadDim>::run(p, p.plan.prefill_items[unit / p.num_q_heads],
                                  unit % p.num_q_heads, smem, tid);
  } else if (kind == 1) {
    const int per_item = p.num_kv_heads * p.decode_head_chunks;
    if (params.virtual_decode == 1) {
      const int tile = unit;
      const int in_item = tile % per_item;
      DecodeTile<T, kHeadDim>::run(p, p.plan.decode_items[tile / per_item],
                                   in_item / p.decode_head_chunks, in_item % p.decode_head_chunks,
                                   smem, tid);
    } else {
      // Two virtual decode CTAs: warps 0-1 and warps 2-3, each with its own
      // shared memory and named barrier (1 and 2).
      using Virtual = VirtualDecodeTile<T, kHeadDim, 2>;
      const int half = tid / Virtual::kThreads;
      const int tile = 2 * unit + half;
      if (tile < params.decode_tiles) {
        const int in_item = tile % per_item;
        Virtual::run(p, p.plan.decode_items[tile / per_item], in_item / p.decode_head_chunks,
                     in_item % p.decode_head_chunks, smem + half * Virtual::kSmemBytes,
                     tid % Virtual::kThreads, 1 + half);
      }
    }
  }
}

template <typename T>
Status launch_pod_typed(const PodParams& params, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    const int smem = pod_smem_bytes<T, kHeadDim>(params.virtual_decode);
    auto* kernel = pod_kernel<T, kHeadDim>;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kPodMaxSmemBytes<T, kHeadDim>),
        StatusCode::internal);
    const unsigned grid = static_cast<unsigned>(params.prefill_ctas + params.decode_ctas);
    kernel<<<grid, kAttentionThreads, smem, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Result<int> pod_ctas_per_sm_typed(int head_dim, int virtual_decode) {
  int ctas = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    const int smem = pod_smem_bytes<T, kHeadDim>(virtual_decode);
    auto* kernel = pod_kernel<T, kHeadDim>;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kPodMaxSmemBytes<T, kHeadDim>),
        StatusCode::internal);
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kAttentionThreads, smem),
        StatusCode::internal);
  });
  return ctas;
}

}  // namespace vpod::attention::device
