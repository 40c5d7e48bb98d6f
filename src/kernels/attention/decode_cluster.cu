// The cluster-merged decode kernel (sm_90): the tile decode kernel
// (DecodeTile) whose KV splits of one (decode, KV head, head chunk) run as one
// thread-block cluster and merge through distributed shared memory.
//
// The split-KV merge of decode_kernel goes through global memory: each split
// writes fp32 partial rows, fences, counts itself in on an arrival counter,
// and the last one reads every split's rows back from L2. That sits on the
// critical path of the last group (docs/attention.md, *Measurements behind
// the code*). Here the S splits of a group are the S CTAs of a cluster
// (S = 2..8, cluster dims (1, S, 1) over the plan's decode items, which the
// plan groups by decode): each CTA merges its four warps and keeps
// its normalized rows and log-sum-exp (exactly the counter merge's partial
// rows) in its own shared memory, one cluster barrier makes them visible, and
// CTA r merges rows r, r + S, ... over the splits in order straight from the
// CTAs' shared memory with the counter merge's arithmetic (merge_split_rows),
// so both merges give the same bits (POD's fused kernel, which merges through
// the counters, is compared bit for bit with the decode kernel). A second
// barrier keeps every CTA's shared memory alive until the others have read
// it. No partial rows in global memory, no fence, no atomic, no L2 round trip.
//
// The plan says when this applies (AttentionPlan::decode_cluster_size():
// every decode in the same number S of splits, 2 <= S <= 8); the launcher
// uses it when the device runs this kernel's sm_90 code, else the counter
// merge of decode_kernel on the same plan. The heads kernel has the same
// scheme (decode_heads_tile.cuh, decode_heads_cluster_kernel).
#include <cooperative_groups.h>

#include "cuda/per_device_once.h"
#include "kernels/attention/attention_kernels.cuh"

namespace vpod::attention {
namespace device {
namespace {

namespace cg = cooperative_groups;

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kAttentionThreads, kDecodeCtasPerSm)
    decode_cluster_kernel(const __grid_constant__ AttentionParams params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Tile = DecodeTile<T, kHeadDim>;
  using E = ElementTraits<T>;
  constexpr int kRows = Tile::kRows;
  extern __shared__ __align__(128) char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int head_chunk = static_cast<int>(blockIdx.x) % params.decode_head_chunks;
  const int kv_head = static_cast<int>(blockIdx.x) / params.decode_head_chunks;
  const DecodeWorkItem item = params.plan.decode_items[blockIdx.y];
  Tile::accumulate(params, item, kv_head, head_chunk, smem, tid);
  __syncthreads();
  // This split's normalized rows and log-sum-exp, computed as for the
  // counter merge's partial rows (DecodeTile::merge_warps), into shared memory.
  constexpr int kCols = Tile::kColsPerThread;  // 16 or 8
  const int row = tid / Tile::kThreadsPerRow;
  const int col0 = (tid % Tile::kThreadsPerRow) * kCols;
  {
    float acc[kCols];
    float overall_max, total;
    Tile::merge_warps(smem, tid, acc, overall_max, total);
    float* dst = Tile::split_o(smem) + row * kHeadDim + col0;
#pragma unroll
    for (int c = 0; c < kCols; c += 4) {
      *reinterpret_cast<float4*>(dst + c) = make_float4(acc[c], acc[c + 1], acc[c + 2], acc[c + 3]);
    }
    if (tid % Tile::kThreadsPerRow == 0) {
      Tile::split_lse(smem)[row] = total > 0.f ? overall_max + __log2f(total) : -INFINITY;
    }
  }

  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every split's rows are written (release / acquire)
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  // CTA `rank` merges rows rank, rank + splits, ... over the splits in order,
  // with the counter merge's arithmetic (merge_split_rows): the same bits.
  const int rows = min(kRows, params.group_size - head_chunk * kRows);
  const bool mine = row < rows && row % splits == rank;
  float acc[kCols];
  float running_max = -INFINITY, total = 0.f;
  if (mine) {
    merge_split_rows<kCols>(
        splits,
        [&](int s, float& lse, float4(&v)[kCols / 4]) {
          char* remote = cluster.map_shared_rank(smem, s);
          lse = Tile::split_lse(remote)[row];
          const float4* src =
              reinterpret_cast<const float4*>(Tile::split_o(remote) + row * kHeadDim + col0);
#pragma unroll
          for (int i = 0; i < kCols / 4; ++i) v[i] = src[i];
        },
        acc, running_max, total);
  }
  // Done reading the other CTAs' shared memory (release); wait before exiting
  // until they are done reading ours.
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  if (mine) {
    const float inv = total > 0.f ? 1.f / total : 0.f;
    const int head = kv_head * params.group_size + head_chunk * kRows + row;
    T* dst = static_cast<T*>(params.out) +
             static_cast<std::int64_t>(item.token_offset) * params.out_token_stride +
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
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  (void)params;
  __trap();  // launched only where the device runs the sm_90 code (cluster_merge_supported)
#endif
}

template <typename T, int kHeadDim>
Status prepare() {
  VPOD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(decode_cluster_kernel<T, kHeadDim>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 DecodeTile<T, kHeadDim>::kSmemBytes),
                            StatusCode::internal);
  return Status();
}

// Whether this device runs the kernel's sm_90 code (binary version 9.0 or
// later: the sm_90a cubin; an sm_80 build's body would trap).
template <typename T, int kHeadDim>
bool supported() {
  static const bool ok = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, decode_cluster_kernel<T, kHeadDim>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.binaryVersion >= 90;
  }();
  return ok;
}

template <typename T>
Result<bool> cluster_supported_typed(int head_dim) {
  bool ok = false;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, { ok = supported<T, kHeadDim>(); });
  return ok;
}

template <typename T>
Result<int> cluster_occupancy_typed(int head_dim, int cluster_size) {
  int clusters = 0;
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    VPOD_RETURN_IF_ERROR((prepare<T, kHeadDim>()));
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1, static_cast<unsigned>(cluster_size) * 1024);
    config.blockDim = dim3(kAttentionThreads);
    config.dynamicSmemBytes = DecodeTile<T, kHeadDim>::kSmemBytes;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = 1;
    attribute[0].val.clusterDim.y = static_cast<unsigned>(cluster_size);
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaOccupancyMaxActiveClusters(&clusters, decode_cluster_kernel<T, kHeadDim>, &config),
        StatusCode::internal);
  });
  return clusters;
}

template <typename T>
Status cluster_launch_typed(const AttentionParams& params, int head_dim, int cluster_size,
                            cudaStream_t stream) {
  VPOD_ATTENTION_DISPATCH_HEAD_DIM(head_dim, kHeadDim, {
    VPOD_RETURN_IF_ERROR((cuda::prepare_on_current_device<&prepare<T, kHeadDim>>()));
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(params.num_kv_heads * params.decode_head_chunks),
                          static_cast<unsigned>(params.num_decode_items));
    config.blockDim = dim3(kAttentionThreads);
    config.dynamicSmemBytes = DecodeTile<T, kHeadDim>::kSmemBytes;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = 1;
    attribute[0].val.clusterDim.y = static_cast<unsigned>(cluster_size);
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaLaunchKernelEx(&config, decode_cluster_kernel<T, kHeadDim>, params),
        StatusCode::internal);
  });
  return Status();
}

}  // namespace
}  // namespace device

namespace detail {

bool decode_cluster_supported(DType dtype, int head_dim) {
  const Result<bool> ok = dtype == DType::f16
                              ? device::cluster_supported_typed<half>(head_dim)
                              : device::cluster_supported_typed<__nv_bfloat16>(head_dim);
  return ok.ok() && *ok;
}

Result<int> decode_cluster_max_active(DType dtype, int head_dim, int cluster_size) {
  return dtype == DType::f16
             ? device::cluster_occupancy_typed<half>(head_dim, cluster_size)
             : device::cluster_occupancy_typed<__nv_bfloat16>(head_dim, cluster_size);
}

Status launch_decode_cluster(const AttentionParams& params, DType dtype, int head_dim,
                             int cluster_size, cudaStream_t stream) {
  if (cluster_size < 2 || cluster_size > kMaxDecodeClusterSize ||
      params.num_decode_items % cluster_size != 0) {
    return invalid_argument("decode cluster merge needs 2..8 splits per decode item group");
  }
  return dtype == DType::f16
             ? device::cluster_launch_typed<half>(params, head_dim, cluster_size, stream)
             : device::cluster_launch_typed<__nv_bfloat16>(params, head_dim, cluster_size, stream);
}

}  // namespace detail
}  // namespace vpod::attention
