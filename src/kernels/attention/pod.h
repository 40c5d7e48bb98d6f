// POD-Attention: a hybrid batch's prefill and decode attention in ONE kernel
// launch, with SM-aware CTA scheduling (docs/pod.md; seeds.md section 2).
//
// One engine step:
//   static PodDevice gpu = query_pod_device(dims).value();                (once per process)
//   PodCounters counters = PodCounters::create(stream).value();           (once per stream)
//   plan.build(batch, dims, {.mode = mode, .device = gpu});              (CPU, once per step)
//   plan.upload(buffers, stream);                                         (once per step)
//   per layer: append_kv(plan.attention(), buffers, k_new, v_new, kv, stream);
//              hybrid_attention(plan, buffers, counters, q, kv, out, scale, stream);
// hybrid_attention runs the fused kernel (mode pod) or the separate prefill and
// decode kernels (mode serial); both read and write the same tensors as
// attention.h's launchers. Like them it validates every input, returns a
// Status, allocates nothing and only enqueues on `stream`, so a layer can be
// captured in a CUDA graph: the scheduling counters reset themselves at the
// end of every launch (one PodCounters per stream that launches POD).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "cuda/device_buffer.h"
#include "kernels/attention/attention.h"

namespace vpod::attention {

// How a step's attention runs: the fused POD kernel, or prefill then decode.
enum class AttentionMode { serial, pod };
Result<AttentionMode> parse_attention_mode(std::string_view name);  // "pod" | "serial"
const char* attention_mode_name(AttentionMode mode);

// How a CTA's per-SM ticket picks its kind: in proportion to the prefill and
// decode CTA counts (default), or alternating 50:50.
enum class PodRatio { proportional, even };
Result<PodRatio> parse_pod_ratio(std::string_view name);  // "proportional" | "even"
const char* pod_ratio_name(PodRatio ratio);

// What the GPU offers the fused kernel, from occupancy queries on the current
// device (query_pod_device) or filled by hand (tests).
struct PodDevice {
  int num_sms = 0;
  // Co-resident CTAs per SM of the fused kernel with the prefill tile below.
  int ctas_per_sm = 0;
  // The prefill tile inside the fused kernel: the sm_90a wgmma tile or the
  // mma.sync tile.
  bool wgmma_prefill = false;
  // CTAs per SM of the warp-specialized kernel where the device runs it, else
  // 0 (PlanOptions::ws_prefill_ctas_per_sm). Where it runs (ws_prefill_runs)
  // it is the standalone prefill (the serial kernels, the fallback): the
  // planner's serial estimate counts its speed, not the fused kernel's tile's,
  // and the serial plans size their splits for it.
  int ws_prefill_ctas_per_sm = 0;
  // The serial plans' (the fallback's) cluster-merged decode slots.
  DecodeClusterSlots decode_cluster_slots{};
};
// The current device. The wgmma prefill tile is chosen where the GPU runs its
// sm_90a code, unless `allow_wgmma` is false (pass KernelOptions::wgmma_prefill,
// so that POD and the standalone prefill run the same tile).
Result<PodDevice> query_pod_device(const AttentionDims& dims, bool allow_wgmma = true);

struct PodOptions {
  AttentionMode mode = AttentionMode::pod;
  PodDevice device;  // required: num_sms and ctas_per_sm
  PodRatio ratio = PodRatio::proportional;
  // 0: the planner decides (see PodConfig::reason). n > 0 forces a value.
  int prefill_splits = 0;  // KV splits per prefill tile
  int decode_splits = 0;   // KV splits of the longest decode
  // Prefill CTAs the planner splits up to (0: 2 x num_sms); it goes beyond
  // (up to 8 splits) only for an estimated gain of >= 5%.
  int max_prefill_ctas = 0;
  // false: never beyond max_prefill_ctas (the paper's rule as is).
  bool allow_beyond_prefill_limit = true;
  // The planner may take the other ratio policy than `ratio` when its
  // estimate is >= 2% faster (false: `ratio` as given).
  bool choose_ratio = true;
  // When the fused kernel's estimate does not beat the serial kernels'
  // (prefill() then decode() with attention.h's own plan), the plan runs
  // those instead (PodConfig::fused = false), so POD is never planned slower
  // than serial. false: always the fused kernel.
  bool serial_fallback = true;
  // Format PodConfig::reason (benchmarks, tests); off, a step formats nothing.
  bool explain = false;
  // How the launchers run the plan (PlanOptions::kernels).
  KernelOptions kernels{};
};

// What the planner chose for one step, and why.
struct PodConfig {
  AttentionMode mode = AttentionMode::pod;
  // Mode pod: true runs the fused kernel; false is the serial fallback (the
  // plan is attention.h's own; pod() runs prefill() then decode()).
  bool fused = true;
  PodRatio ratio = PodRatio::proportional;
  bool wgmma_prefill = false;  // the device's prefill tile (PodDevice::wgmma_prefill)
  int ctas_per_sm = 0;         // fused kernel occupancy for that choice
  int prefill_splits = 1;      // passed to AttentionPlan (forced)
  int decode_splits = 1;
  int prefill_ctas = 0;    // prefill tiles x query heads (after splits)
  int decode_tiles = 0;    // decode items x KV heads x head chunks (after splits)
  int decode_ctas = 0;     // one per decode tile
  int grid = 0;            // prefill_ctas + decode_ctas: CTAs of the one launch
  double estimate_us = 0;  // the planner's makespan estimate (H200 calibration)
  // Prefill split beyond max_prefill_ctas because the estimate gained >= 5%
  // over the best plan within it (estimate_within_limit_us).
  bool prefill_beyond_limit = false;
  double estimate_within_limit_us = 0;
  // The serial kernels' estimate (0 when not estimated: made for the
  // fallback, or for PodOptions::explain without it).
  double serial_estimate_us = 0;
  // Its prefill part (the rest is the decode grid's): lets a benchmark replay
  // the fallback rule under another prefill cost offline.
  double serial_prefill_estimate_us = 0;
  // Why, in words: only with PodOptions::explain (else empty).
  std::string reason;
};

// The plan of one step: the work lists (an AttentionPlan whose KV splits the
// POD planner chose) and the fused kernel's configuration. CPU only; every
// layer of the step reuses it. A value: plan each step into the same object
// with build(), which reuses its memory (no allocation once warmed up to the
// largest step, unless PodOptions::explain formats the reason).
class PodPlan {
 public:
  PodPlan() = default;
  // A new plan (build() into a fresh object).
  static Result<PodPlan> create(const HybridBatch& batch, const AttentionDims& dims,
                                const PodOptions& options);
  // Plans `batch` into this object, replacing its content. On an error the
  // plan is left empty (no work items, grid 0).
  Status build(const HybridBatch& batch, const AttentionDims& dims, const PodOptions& options);

  const AttentionPlan& attention() const { return plan_; }
  const PodConfig& config() const { return config_; }
  AttentionMode mode() const { return config_.mode; }
  Status upload(const AttentionBuffers& buffers, cudaStream_t stream) const {
    return plan_.upload(buffers, stream);
  }

  // The planner's memory, kept between builds (cleared, never shrunk).
  struct Scratch {
    std::vector<int> tile_blocks, tile_rows, decode_blocks;  // the batch, in key blocks
    std::vector<int> decode_candidates;                      // decode split counts to try
    std::vector<std::pair<double, int>> prefill_pieces;      // (cost, CTA groups)
    std::vector<double> prefill_costs, decode_work;
    std::vector<int> decode_pieces;
    std::vector<unsigned> tickets;                                  // per SM
    std::vector<std::pair<double, int>> prefill_heap, decode_heap;  // simulation events
  };

 private:
  Status plan_step(const HybridBatch& batch, const AttentionDims& dims, const PodOptions& options);
  void reset();

  AttentionPlan plan_;
  PodConfig config_;
  Scratch scratch_;
};

// The fused kernel's scheduling counters: per-SM tickets (sized from the
// device's %nsmid), per-kind tile counters and a completion counter. Zeroed
// once at creation on `stream`; every launch leaves them zero again (the last
// CTA to claim its tile resets them), so no memset runs per launch and the
// launch can be captured in a CUDA graph. Use one PodCounters per stream (two
// launches in flight at once must not share counters).
class PodCounters {
 public:
  static Result<PodCounters> create(cudaStream_t stream);
  std::uint32_t* data() const { return buffer_.as<std::uint32_t>(); }
  int num_sm_counters() const { return num_sm_counters_; }
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  cuda::DeviceBuffer buffer_;
  int num_sm_counters_ = 0;
};

// Optional per-CTA record of what ran where (tests of placement independence):
// for CTA b, trace[3b] = kind (0 prefill, 1 decode), trace[3b+1] = tile or
// decode-CTA index, trace[3b+2] = %smid. Device memory of 3 x grid int32.
struct PodTrace {
  std::int32_t* data = nullptr;
  int capacity_ctas = 0;
};

// The fused launch, plus a combine launch when the plan split prefill KV, or
// split decode KV with two decode tiles per CTA (with one, the decode's last
// split merges in the kernel). A serial-fallback plan (config().fused false)
// runs prefill() then decode() instead. The plan must be in mode pod and uploaded to
// `buffers` (the upload zeroes the decode merge counters; launches leave them
// zero).
Status pod(const PodPlan& plan, const AttentionBuffers& buffers, const PodCounters& counters,
           const TensorView& q, const KvLayerView& kv, const TensorView& out, float softmax_scale,
           cudaStream_t stream, const PodTrace& trace = {});

// The step's attention in the plan's mode: pod(), or prefill() then decode().
Status hybrid_attention(const PodPlan& plan, const AttentionBuffers& buffers,
                        const PodCounters& counters, const TensorView& q, const KvLayerView& kv,
                        const TensorView& out, float softmax_scale, cudaStream_t stream);

}  // namespace vpod::attention
