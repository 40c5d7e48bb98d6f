// The attention kernels (thin wrappers around the tiles) and their typed
// launch functions, instantiated per element type in prefill_*.cu / decode_*.cu.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "common/cuda_check.h"
#include "cuda/per_device_once.h"
#include "kernels/attention/attention_kernels.h"
#include "kernels/attention/decode_heads_tile.cuh"
#include "kernels/attention/decode_tile.cuh"
#include "kernels/attention/prefill_tile.cuh"
#include "kernels/attention/prefill_wgmma.cuh"
#include "kernels/attention/prefill_ws.cuh"

// Turns a runtime head_dim into the constexpr `kName` for the body; an
// unsupported value returns `unimplemented` (validate_dims rejects it first).
#define VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kName, ...)                          \
  switch (head_dim) {                                                                   \
    case 64: {                                                                          \
      constexpr int kName = 64;                                                         \
      __VA_ARGS__                                                                       \
    } break;                                                                            \
    case 128: {                                                                         \
      constexpr int kName = 128;                                                        \
      __VA_ARGS__                                                                       \
    } break;                                                                            \
    default:                                                                            \
      return ::vpod::unimplemented("attention kernels are not compiled for head_dim " + \
                                   std::to_string(head_dim) + " (64, 128)");            \
  }

namespace vpod::attention::device {

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kPrefillCtasPerSm)
    prefill_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  PrefillTile<T, kHeadDim>::run(params, params.plan.prefill_items[blockIdx.y],
                                static_cast<int>(blockIdx.x), smem, static_cast<int>(threadIdx.x));
}

// The split-KV merge folded into the decode kernel: every split CTA of a
// (decode, KV head, head chunk) group counts itself in after writing its
// partial rows; the last one merges the group's rows by their log-sum-exp
// (merge_partial_rows: one pass, splits in order) and resets the counter, so
// the next launch or graph replay starts from zero again.
template <typename T, int kHeadDim>
__device__ __forceinline__ void merge_decode_splits(const AttentionParams& p, int combine,
                                                    int kv_head, int head_chunk, int tid) {
  using E = ElementTraits<T>;
  __shared__ int is_last;
  const CombineItem c = p.plan.decode_combines[combine];
  __threadfence();  // this CTA's partial rows are visible device-wide before it counts
  __syncthreads();
  if (tid == 0) {
    int* counter =
        p.plan.decode_counters +
        (static_cast<std::int64_t>(combine) * p.num_kv_heads + kv_head) * p.decode_head_chunks +
        head_chunk;
    const int arrived = atomicAdd(counter, 1);
    is_last = arrived == c.num_splits - 1;
    if (is_last) *counter = 0;  // every split of this launch has counted
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();                                                 // see the other splits' rows
  constexpr int kThreadsPerRow = kAttentionThreads / kDecodeRows;  // 8
  constexpr int kCols = kHeadDim / kThreadsPerRow;                 // 16 or 8
  const int row = tid / kThreadsPerRow;
  const int rows = min(kDecodeRows, p.group_size - head_chunk * kDecodeRows);
  if (row >= rows) return;
  const int head = kv_head * p.group_size + head_chunk * kDecodeRows + row;
  const int col0 = (tid % kThreadsPerRow) * kCols;
  float acc[kCols];
  float running_max = -INFINITY, total = 0.f;
  merge_partial_rows<kCols>(p.plan.partial_o, p.plan.partial_lse, c,
                            static_cast<std::int64_t>(p.num_q_heads), head, kHeadDim, col0, acc,
                            running_max, total);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  T* dst = static_cast<T*>(p.out) + static_cast<std::int64_t>(c.token) * p.out_token_stride +
           static_cast<std::int64_t>(head) * kHeadDim + col0;
#pragma unroll
  for (int i = 0; i < kCols; i += 8) {
    uint4 packed;
    packed.x = E::pack(acc[i] * inv, acc[i + 1] * inv);
    packed.y = E::pack(acc[i + 2] * inv, acc[i + 3] * inv);
    packed.z = E::pack(acc[i + 4] * inv, acc[i + 5] * inv);
    packed.w = E::pack(acc[i + 6] * inv, acc[i + 7] * inv);
    *reinterpret_cast<uint4*>(dst + i) = packed;
  }
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kDecodeCtasPerSm)
    decode_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  const int chunk = static_cast<int>(blockIdx.x) % params.decode_head_chunks;
  const int kv_head = static_cast<int>(blockIdx.x) / params.decode_head_chunks;
  const DecodeWorkItem item = params.plan.decode_items[blockIdx.y];
  DecodeTile<T, kHeadDim>::run(params, item, kv_head, chunk, smem, static_cast<int>(threadIdx.x));
  if (params.plan.decode_counters != nullptr && item.combine >= 0) {
    merge_decode_splits<T, kHeadDim>(params, item.combine, kv_head, chunk,
                                     static_cast<int>(threadIdx.x));
  }
}

// Whether the device runs the wgmma prefill kernel's sm_90a code (binary and
// PTX version 9.0; anything else would trap). A property of the device and the
// binary, queried once.
template <typename T, int kHeadDim>
bool wgmma_prefill_runs_here() {
  static const bool runs = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, prefill_wgmma_kernel<T, kHeadDim>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90 && attr.ptxVersion == 90;
  }();
  return runs;
}

// Whether the device runs the warp-specialized prefill kernel's sm_90a code.
template <typename T, int kHeadDim>
bool ws_prefill_runs_here() {
  static const bool runs = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, prefill_ws_kernel<T, kHeadDim, 1>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90 && attr.ptxVersion == 90;
  }();
  return runs;
}

// The K/V-multicast kernel's shared-memory opt-in, needed on each device
// (cuda::prepare_on_current_device).
template <typename T, int kHeadDim>
Status prepare_ws_multicast() {
  VPOD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(prefill_ws_kernel<T, kHeadDim, 2>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 PrefillWsTile<T, kHeadDim, 2>::kSmemBytes),
                            StatusCode::internal);
  return Status();
}

// The launch configuration of the K/V-multicast warp-specialized kernel: CTAs
// in clusters of 2. The config points at the cluster attribute beside it, so
// the object is neither copied nor moved.
template <typename T, int kHeadDim>
struct WsMulticastLaunch {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute cluster{};

  WsMulticastLaunch(unsigned grid, cudaStream_t stream) {
    using Tile = PrefillWsTile<T, kHeadDim, 2>;
    config.gridDim = dim3(grid);
    config.blockDim = dim3(Tile::kThreads);
    config.dynamicSmemBytes = Tile::kSmemBytes;
    config.stream = stream;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 2;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  WsMulticastLaunch(const WsMulticastLaunch&) = delete;
  WsMulticastLaunch& operator=(const WsMulticastLaunch&) = delete;
};

// Clusters of 2 of the K/V-multicast warp-specialized kernel that fit on the
// device at once (0 where none would), queried once per process (the devices of
// one process are alike; the opt-in above is per device).
template <typename T, int kHeadDim>
int ws_multicast_clusters() {
  static const int clusters = [] {
    if (!cuda::prepare_on_current_device<&prepare_ws_multicast<T, kHeadDim>>().ok()) {
      (void)cudaGetLastError();
      return 0;
    }
    const WsMulticastLaunch<T, kHeadDim> launch(2 * 1024, nullptr);
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, prefill_ws_kernel<T, kHeadDim, 2>, &launch.config) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return clusters;
}

// The warp-specialized kernel: min(tiles, SMs) persistent CTAs, or, with K/V
// multicast, min(tile pairs, co-resident clusters) clusters of 2. Multicast
// runs where the two query heads of a pair share their KV head (an even group,
// one query head per tile: not packed) and where the clusters cover every SM
// (a GPC with an odd free SM would otherwise idle it). Pairs always walk
// item-major, chunks whose one-CTA walk is head-major included
// (docs/attention.md, *K/V multicast*).
template <typename T, int kHeadDim>
Status launch_prefill_ws(const AttentionParams& params, const KernelOptions& options,
                         cudaStream_t stream) {
  int device = 0, sms = 0;
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), StatusCode::internal);
  VPOD_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                            StatusCode::internal);
  if (options.ws_multicast && params.ws_mixed == 0 && params.ws_pack == 1 &&
      params.group_size % 2 == 0 && params.ws_num_tiles % 2 == 0) {
    const int clusters = ws_multicast_clusters<T, kHeadDim>();
    if (clusters > 0 && 2 * clusters >= sms - 1) {
      VPOD_RETURN_IF_ERROR((cuda::prepare_on_current_device<&prepare_ws_multicast<T, kHeadDim>>()));
      const WsMulticastLaunch<T, kHeadDim> launch(
          static_cast<unsigned>(2 * std::min(params.ws_num_tiles / 2, clusters)), stream);
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaLaunchKernelEx(&launch.config, prefill_ws_kernel<T, kHeadDim, 2>, params),
          StatusCode::internal);
      return Status();
    }
  }
  constexpr int kSmem = PrefillWsTile<T, kHeadDim>::kSmemBytes;
  auto* kernel = prefill_ws_kernel<T, kHeadDim, 1>;
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
      StatusCode::internal);
  const unsigned grid = static_cast<unsigned>(std::min(params.ws_num_tiles, sms));
  kernel<<<grid, PrefillWsTile<T, kHeadDim>::kThreads, kSmem, stream>>>(params);
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  return Status();
}

// The wgmma tile's launch-time switches (KernelOptions).
inline WgmmaKnobs wgmma_knobs(const KernelOptions& options) {
  WgmmaKnobs k;
  if (!options.wgmma_lazy_rescale) k.lazy_rescale = false;
  return k;
}

// The prefill kernel: on a contiguous cache with TMA descriptors the
// warp-specialized one (unless options.ws_prefill is false), else the wgmma
// tile where the device runs it (unless options.wgmma_prefill is false), else
// the mma.sync one.
template <typename T>
Status launch_prefill_typed(const AttentionParams& params, const KernelOptions& options,
                            int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (options.wgmma_prefill && options.ws_prefill && params.q_tma_valid != 0 &&
        params.kv_tma.valid != 0 && ws_prefill_runs_here<T, kHeadDim>()) {
      return launch_prefill_ws<T, kHeadDim>(params, options, stream);
    }
    if (options.wgmma_prefill && wgmma_prefill_runs_here<T, kHeadDim>()) {
      constexpr int kSmem = PrefillWgmmaTile<T, kHeadDim>::kSmemBytes;
      auto* kernel = prefill_wgmma_kernel<T, kHeadDim>;
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
          StatusCode::internal);
      const dim3 grid(static_cast<unsigned>(params.num_q_heads),
                      static_cast<unsigned>(params.num_prefill_items));
      kernel<<<grid, kAttentionThreads, kSmem, stream>>>(params, wgmma_knobs(options));
      VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
      return Status();
    }
    constexpr int kSmem = PrefillTile<T, kHeadDim>::kSmemBytes;
    auto* kernel = prefill_kernel<T, kHeadDim>;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
        StatusCode::internal);
    const dim3 grid(static_cast<unsigned>(params.num_q_heads),
                    static_cast<unsigned>(params.num_prefill_items));
    kernel<<<grid, kAttentionThreads, kSmem, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

template <typename T>
Status launch_decode_typed(const AttentionParams& params, int head_dim, cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    constexpr int kSmem = DecodeTile<T, kHeadDim>::kSmemBytes;
    auto* kernel = decode_kernel<T, kHeadDim>;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
        StatusCode::internal);
    const dim3 grid(static_cast<unsigned>(params.num_kv_heads * params.decode_head_chunks),
                    static_cast<unsigned>(params.num_decode_items));
    kernel<<<grid, kAttentionThreads, kSmem, stream>>>(params);
    VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  });
  return Status();
}

// CTAs of `kernel` with `smem` bytes of dynamic shared memory that fit on one SM.
template <typename Kernel>
Result<int> fit_per_sm(Kernel* kernel, int smem) {
  int ctas = 0;
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
      StatusCode::internal);
  VPOD_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kAttentionThreads, smem),
      StatusCode::internal);
  return ctas;
}

template <typename T>
Result<int> ws_multicast_clusters_typed(int head_dim) {
  int clusters = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (ws_prefill_runs_here<T, kHeadDim>()) clusters = ws_multicast_clusters<T, kHeadDim>();
  });
  return clusters;
}

template <typename T>
Result<int> ctas_per_sm_typed(detail::KernelKind kind, int head_dim) {
  int ctas = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    if (kind == detail::KernelKind::prefill_ws) {
      if (!ws_prefill_runs_here<T, kHeadDim>()) return 0;
      using Tile = PrefillWsTile<T, kHeadDim>;
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(prefill_ws_kernel<T, kHeadDim, 1>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes),
          StatusCode::internal);
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, prefill_ws_kernel<T, kHeadDim, 1>,
                                                        Tile::kThreads, Tile::kSmemBytes),
          StatusCode::internal);
    } else if (kind == detail::KernelKind::prefill && wgmma_prefill_runs_here<T, kHeadDim>()) {
      VPOD_ASSIGN_OR_RETURN(ctas, fit_per_sm(prefill_wgmma_kernel<T, kHeadDim>,
                                             PrefillWgmmaTile<T, kHeadDim>::kSmemBytes));
    } else if (kind == detail::KernelKind::prefill) {
      VPOD_ASSIGN_OR_RETURN(
          ctas, fit_per_sm(prefill_kernel<T, kHeadDim>, PrefillTile<T, kHeadDim>::kSmemBytes));
    } else {
      VPOD_ASSIGN_OR_RETURN(
          ctas, fit_per_sm(decode_kernel<T, kHeadDim>, DecodeTile<T, kHeadDim>::kSmemBytes));
    }
  });
  return ctas;
}

}  // namespace vpod::attention::device
