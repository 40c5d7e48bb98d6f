// The fused POD kernel on the warp-specialized mainloop (sm_90a): one
// persistent launch of one CTA per SM in which the SMs divide between the two
// kinds of work of a hybrid batch.
//
//   CTAs [0, prefill_ctas): the warp-specialized prefill's own walk
//     (PrefillWsTile::run with the walk of these CTAs only): producer warp,
//     two ping-pong consumer warpgroups, TMA rings, GQA packing, splits.
//   CTAs [prefill_ctas, grid): decode. Warpgroup 0 runs the deep decode
//     kernel's tile (DecodeTile with 6 stages for head_dim 128, 8 for 64:
//     the decode kernel's main loop, ~160 KB of K/V in flight) and claims
//     decode tiles (decode item x KV head x head chunk) one at a time from a
//     global counter, longest first (the plan's order), until none is left;
//     warpgroups 1 and 2 have nothing to do and leave.
//
// Why SMs and not slots of one SM: the warp-specialized CTA needs the SM's
// whole register file and 194 KB of shared memory (docs/pod.md: 24 + 2 x
// 200 registers per thread slot of its three warpgroups), so no decode tile
// can sit beside it. The overlap POD-Attention is after still happens, across
// SMs of one launch. An SM's decode bandwidth is bound by the bytes it keeps
// in flight (its shared memory over the loaded HBM latency): the deep tile
// streams ~61 GB/s per SM, three 2-stage tiles only ~30 (H200, 2026-12-03,
// docs/pod.md), so decode needs ~75 SMs to saturate HBM and the prefill SMs
// keep the tensor cores busy on the rest. The planner (pod_plan.cpp) picks
// prefill_ctas from its estimates of the two sides.
//
// Synchronization: the prefill CTAs use the warp-specialized kernel's
// barriers (ids 1-4, mbarriers); a decode CTA's warpgroups never meet each
// other, only their own named barrier (1 + warpgroup). Split KV (either kind)
// writes fp32 partial rows; the combine kernel merges them after the launch.
//
// The decode counter (PodParams::counters, kPodCounterDecode) starts at zero;
// every decode warpgroup claims past the end exactly once, counts itself on
// kPodCounterDone, and the last one zeroes both, so the next launch (or a
// graph replay) finds them zero with no memset.
#pragma once

#include "common/cuda_check.h"
#include "kernels/attention/attention_kernels.cuh"
#include "kernels/attention/decode_tile.cuh"
#include "kernels/attention/pod_params.h"
#include "kernels/attention/prefill_ws.cuh"

namespace vpod::attention::device {

template <typename T, int kHeadDim>
struct PodWsCta {
  using Prefill = PrefillWsTile<T, kHeadDim>;
  // The deep decode kernel's tile (decode_deep.cu): the most K/V in flight
  // that one SM's shared memory holds.
  using Decode = DecodeTile<T, kHeadDim, kHeadDim == 128 ? 6 : 8, 4>;
  static constexpr int kThreads = Prefill::kThreads;
  static constexpr int kDecodeBarrier = 1;
  static constexpr int kSmemBytes =
      Prefill::kSmemBytes > Decode::kSmemBytes ? Prefill::kSmemBytes : Decode::kSmemBytes;
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM");

  // Warpgroup 0 of a decode CTA: claims and runs decode tiles until none is
  // left. The CTA's other warpgroups have left, so the tile meets at its own
  // named barrier, never __syncthreads.
  static __device__ void decode(const PodParams& params, char* smem, int decode_ctas, int tid) {
    __shared__ int claimed;
    const AttentionParams& p = params.attn;
    const unsigned tiles = static_cast<unsigned>(params.decode_tiles);
    const int per_item = p.num_kv_heads * p.decode_head_chunks;
    std::uint32_t* counters = params.counters;
    for (;;) {
      if (tid == 0) {
        const unsigned u = atomicAdd(counters + kPodCounterDecode, 1u);
        if (u >= tiles) {
          // This CTA's last claim. Once every decode CTA made its own,
          // nobody reads the counter again in this launch.
          __threadfence();
          if (atomicAdd(counters + kPodCounterDone, 1u) == static_cast<unsigned>(decode_ctas) - 1) {
            __threadfence();
            counters[kPodCounterDecode] = 0u;
            counters[kPodCounterDone] = 0u;
          }
        }
        claimed = static_cast<int>(u < tiles ? u : tiles);
      }
      tile_barrier<Decode::kThreads>(kDecodeBarrier);
      const int tile = claimed;
      if (tile >= static_cast<int>(tiles)) break;
      const int in_item = tile % per_item;
      const DecodeWorkItem item = p.plan.decode_items[tile / per_item];
      Decode::run(p, item, in_item / p.decode_head_chunks, in_item % p.decode_head_chunks, smem,
                  tid, kDecodeBarrier);
      // The tile's shared memory and `claimed` are reused by the next claim.
      tile_barrier<Decode::kThreads>(kDecodeBarrier);
    }
  }

  static __device__ void run(const PodParams& params, char* smem) {
    const int cta = static_cast<int>(blockIdx.x);
    const int tid = static_cast<int>(threadIdx.x);
    if (cta < params.prefill_ctas) {
      Prefill::run(params.attn, smem, {cta, params.prefill_ctas});
    } else if (tid < Decode::kThreads) {
      decode(params, smem, static_cast<int>(gridDim.x) - params.prefill_ctas, tid);
    }
  }
};

// Grid: prefill_ctas + decode CTAs (at most one per SM), PodWsCta::kThreads.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(PodWsCta<T, kHeadDim>::kThreads, 1)
    pod_ws_kernel(const __grid_constant__ PodParams params) {
  extern __shared__ __align__(128) char smem[];
#ifdef VPOD_ATTENTION_HAVE_WGMMA
  PodWsCta<T, kHeadDim>::run(params, smem);
#else
  (void)params;
  __trap();  // the launcher never selects this kernel without sm_90a code
#endif
}

// Whether the device runs the kernel's sm_90a code (binary and PTX 9.0).
template <typename T, int kHeadDim>
bool pod_ws_runs_here() {
  static const bool runs = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, pod_ws_kernel<T, kHeadDim>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90 && attr.ptxVersion == 90 &&
           optin >= PodWsCta<T, kHeadDim>::kSmemBytes &&
           cudaFuncSetAttribute(pod_ws_kernel<T, kHeadDim>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                PodWsCta<T, kHeadDim>::kSmemBytes) == cudaSuccess;
  }();
  return runs;
}

template <typename T>
Status launch_pod_ws_typed(const PodParams& params, int grid, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (!pod_ws_runs_here<T, kHeadDim>()) {
      return failed_precondition(
          "the warp-specialized POD kernel needs sm_90a code and 196 KB of shared memory per CTA");
    }
    pod_ws_kernel<T, kHeadDim><<<static_cast<unsigned>(grid), PodWsCta<T, kHeadDim>::kThreads,
                                 PodWsCta<T, kHeadDim>::kSmemBytes, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Result<bool> pod_ws_runs_here_typed(int head_dim) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, { return pod_ws_runs_here<T, kHeadDim>(); });
  return false;
}

}  // namespace vpod::attention::device
