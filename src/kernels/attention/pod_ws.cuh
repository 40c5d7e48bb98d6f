// The fused POD kernel on the warp-specialized mainloop (sm_90a, contiguous
// caches): one persistent CTA per SM, in which the decodes of a hybrid batch
// run on the warps the warp-specialized prefill leaves idle.
//
//   warpgroup 0: warp 0 is the prefill's producer (TMA into the Q and K/V
//     rings); warps 1 and 2 are decode warps, each running decode units (a
//     decode work item x KV head x head chunk) one at a time through its own
//     4-stage ring of 16-key blocks (DecodeHeadsWarp: the heads decode
//     kernel's arithmetic); warp 3 has nothing to do.
//   warpgroups 1 and 2: the prefill's two ping-pong consumers over the whole
//     grid's walk (PrefillWsTile<.., kFused>: the standalone kernel's walk and
//     arithmetic). When this CTA's walk is done they meet at a named barrier,
//     take the freed Q and K/V rings as eight 2-stage decode rings and become
//     decode warps too.
//
// Why not decode CTAs beside prefill CTAs: the warp-specialized CTA needs the
// SM's whole register file, and dividing the SMs between the two kinds loses
// (a decode SM streams 50-100 GB/s, so decode needs most of the SMs to keep
// HBM busy; docs/pod.md). Here every SM runs both: the prefill at nearly its
// serial speed (the decode warps add ~130 instructions and 16 small mma per
// 8 KB block) and the decodes through ~48 KB in flight per SM, then ~110 KB
// once the SM's prefill tiles are done.
//
// Registers: 120 per thread in warpgroup 0, 192 in the consumers (the 504 of
// the launch's 168 per thread; ptxas allocates each setmaxnreg region on its
// own, docs/pod.md). Shared memory: the prefill's Q and K/V rings and
// barriers (no output staging tile: kFused writes rows from registers), then
// the two decode warps' rings: 225 KB at head_dim 128.
//
// Decode units are claimed one at a time from a global counter
// (PodParams::counters[kPodCounterDecode]), in the plan's order. Every decode
// warp claims past the end exactly once and counts itself on
// kPodCounterDone; the last of them zeroes both, so the next launch (or a
// graph replay) finds them zero with no memset. Split decodes merge through
// the plan's arrival counters (DecodeHeadsTile::finish); split prefill tiles
// through the combine launch after the kernel.
#pragma once

#include "common/cuda_check.h"
#include "kernels/attention/attention_kernels.cuh"
#include "kernels/attention/decode_heads_tile.cuh"
#include "kernels/attention/pod_params.h"
#include "kernels/attention/prefill_ws.cuh"

namespace vpod::attention::device {

template <typename T, int kHeadDim>
struct PodWsCta {
  using Prefill = PrefillWsTile<T, kHeadDim, true>;
  // Warpgroup 0's decode warps (1 and 2) and their 4-stage rings.
  using EarlyDecode = DecodeHeadsWarp<T, kHeadDim, 4>;
  static constexpr int kEarlyWarps = 2;
  // The consumers' eight warps after the walk, 2-stage rings in the freed
  // Q and K/V rings.
  using LateDecode = DecodeHeadsWarp<T, kHeadDim, 2>;
  static constexpr int kLateWarps = 2 * 4;
  static constexpr int kDecodeWarps = kEarlyWarps + kLateWarps;  // per CTA
  static constexpr int kThreads = Prefill::kThreads;
  // The early decode rings, after the prefill's (offset from the aligned base).
  static constexpr int kSmemEarly = (Prefill::kSmemUsed + 127) / 128 * 128;
  static constexpr int kSmemBytes = kSmemEarly + kEarlyWarps * EarlyDecode::kSmemBytes + 1024;
  // The named barrier where the consumers meet after the walk (1-4 are the
  // prefill's).
  static constexpr int kJoinBarrier = 5;
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM");
  static_assert(kLateWarps * LateDecode::kSmemBytes <=
                    Prefill::kSmemQ + 2 * Prefill::kStages * Prefill::kSmemKV,
                "the late decode rings fit in the prefill's Q and K/V rings");

  // Claims and runs decode units on this warp until none is left.
  template <typename Decode>
  static __device__ void decode_units(const PodParams& params, std::uint32_t s_ring, int lane) {
    const AttentionParams& p = params.attn;
    const int per_item = p.num_kv_heads * p.decode_head_chunks;
    const unsigned units = static_cast<unsigned>(params.decode_tiles);
    std::uint32_t* counters = params.counters;
    for (;;) {
      unsigned u = 0;
      if (lane == 0) {
        u = atomicAdd(counters + kPodCounterDecode, 1u);
        if (u >= units) {
          // This warp's last claim. Once every decode warp of the grid made
          // its own, nobody reads the counter again in this launch.
          __threadfence();
          const unsigned warps = gridDim.x * static_cast<unsigned>(kDecodeWarps);
          if (atomicAdd(counters + kPodCounterDone, 1u) == warps - 1) {
            __threadfence();
            counters[kPodCounterDecode] = 0u;
            counters[kPodCounterDone] = 0u;
          }
        }
      }
      u = __shfl_sync(0xffffffffu, u, 0);
      if (u >= units) return;
      const int unit = static_cast<int>(u);
      const DecodeWorkItem item = p.plan.decode_items[unit / per_item];
      Decode::run(p, item, unit % per_item, s_ring, lane);
    }
  }

  static __device__ void run(const PodParams& params, char* smem_raw) {
#ifdef VPOD_ATTENTION_HAVE_WGMMA
    const AttentionParams& p = params.attn;
    const int tid = static_cast<int>(threadIdx.x);
    const std::uint32_t raw = smem_addr(smem_raw);
    const std::uint32_t base = (raw + 1023u) & ~1023u;
    const typename Prefill::Smem sm(base);
    char* smem = smem_raw + (base - raw);
    if (tid == 0) Prefill::init_barriers(sm);
    __syncthreads();
    const int wg = tid / 128;
    const int warp = tid / 32;
    const int lane = tid % 32;
    if (wg == 0) {
      ws::setmaxnreg_dec<Prefill::kProducerRegs>();
      if (warp == 0) {
        Prefill::produce(p, sm, lane);
      } else if (warp <= kEarlyWarps) {
        decode_units<EarlyDecode>(params, base + kSmemEarly + (warp - 1) * EarlyDecode::kSmemBytes,
                                  lane);
      }
    } else {
      ws::setmaxnreg_inc<Prefill::kConsumerRegs>();
      Prefill::consume(p, sm, smem, wg - 1, tid % 128);
      // Both consumers are done with the rings (their last products waited
      // for); every load of this CTA's walk has landed.
      ws::named_sync(kJoinBarrier, Prefill::kConsumerThreads);
      decode_units<LateDecode>(params, base + (warp - 4) * LateDecode::kSmemBytes, lane);
    }
#else
    (void)params, (void)smem_raw;
    __trap();  // the launcher never selects this kernel without sm_90a code
#endif
  }
};

// Grid: one CTA per SM (at most), PodWsCta::kThreads threads.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(PodWsCta<T, kHeadDim>::kThreads, 1)
    pod_ws_kernel(const __grid_constant__ PodParams params) {
  extern __shared__ __align__(128) char smem[];
  PodWsCta<T, kHeadDim>::run(params, smem);
}

// Whether the device runs the kernel's sm_90a code (binary and PTX 9.0) and
// gives a CTA its shared memory.
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
          "the warp-specialized POD kernel needs sm_90a code and 225 KB of shared memory per CTA");
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
