// Plain data of the fused POD kernel, shared by the host launcher and the
// device code (no CUDA headers). Passed by value as a __grid_constant__.
#pragma once

#include <cstdint>

#include "kernels/attention/attention_params.h"

namespace vpod::attention {

// Layout of the counter buffer (uint32): a fixed header, then one ticket
// counter per SM id in [0, num_sm_counters).
inline constexpr int kPodCounterDone = 0;      // CTAs that have claimed their tile
inline constexpr int kPodCounterPrefill = 1;   // next prefill tile
inline constexpr int kPodCounterDecode = 2;    // next decode CTA (group of virtual tiles)
inline constexpr int kPodCounterFallback = 3;  // tickets of an SM id beyond the table
inline constexpr int kPodCounterHeader = 4;
// Bound on the per-SM table (the H200 reports %nsmid = 132).
inline constexpr int kPodMaxSmCounters = 4096;

#if defined(__CUDACC__)
#define VPOD_POD_HOST_DEVICE __host__ __device__
#else
#define VPOD_POD_HOST_DEVICE
#endif

// Kind of a CTA's per-SM ticket t (0 prefill, 1 decode) for P prefill and D
// decode CTAs: the fused kernel's scheduling rule, also simulated by the
// planner. A kind with no CTAs is never picked. Even (50:50): t even is
// prefill. Proportional: t is prefill when ceil((t+1) P / N) > ceil(t P / N),
// N = P + D: P of every N tickets, spread evenly, ticket 0 prefill (the long
// prefill CTAs start first).
VPOD_POD_HOST_DEVICE inline int pod_ticket_kind(unsigned ticket, int prefill, int decode,
                                                bool even) {
  if (prefill == 0) return 1;
  if (decode == 0) return 0;
  if (even) return static_cast<int>(ticket & 1u);
  const unsigned long long total = static_cast<unsigned long long>(prefill) + decode;
  const unsigned long long t = ticket;
  const bool prefill_turn =
      ((t + 1) * prefill + total - 1) / total > (t * prefill + total - 1) / total;
  return prefill_turn ? 0 : 1;
}

struct PodParams {
  AttentionParams attn;
  std::uint32_t* counters = nullptr;  // [kPodCounterHeader + num_sm_counters], zero at launch
  std::int32_t num_sm_counters = 0;
  std::int32_t prefill_ctas = 0;   // prefill work items x query heads
  std::int32_t decode_ctas = 0;    // decode items x KV heads x head chunks (a tile each)
  std::int32_t ratio_even = 0;     // 1: 50:50 tickets; 0: proportional
  std::int32_t wgmma_prefill = 0;  // 1: the sm_90a wgmma prefill tile; 0: mma.sync
  std::int32_t* trace = nullptr;   // optional [3 x grid]: kind, index, smid
};

}  // namespace vpod::attention
