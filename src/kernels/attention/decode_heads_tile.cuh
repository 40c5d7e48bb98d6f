// The heads decode tile: flash-decoding with one warp per (KV head, head
// chunk) "unit" and kDecodeHeadsPerCta (4) units per CTA of 128 threads.
//
// DecodeTile gives a CTA one unit and splits each 64-key block among its four
// warps, so a CTA reads one head's 256-byte rows, 2 KB apart in the
// per-layer layout, and must merge its warps at the end. Here the CTA reads
// the rows of four consecutive heads of each key (1 KB contiguous when the
// heads are adjacent, as in every vAttention layout), each
// warp owns its unit's online softmax over every key of the item, and a warp
// finishes alone: no cross-warp merge, and a split's merge is per warp
// (per-unit arrival counters, no __syncthreads).
//
// Keys stream through a kStages-deep cp.async ring of 16-key stages (stage
// row warp * 16 + key holds key `key` of unit `warp`; the same swizzled tile
// and fragment code as DecodeTile). Q goes straight from global memory into
// the warp's A fragments (the unit's 16 query heads as rows).
//
// With kClusterMerge (sm_90, decode_heads_cluster_kernel), the S splits of a
// decode are the S CTAs of a thread-block cluster: after the main loop each
// warp leaves its normalized rows and log-sum-exp (the counter merge's
// partial rows) in its CTA's shared memory (the ring, no longer needed), and
// after one cluster barrier CTA r merges rows r, r + S, ... of each unit from
// all S CTAs' shared memory with the counter merge's arithmetic
// (merge_split_rows, splits in order: the same bits) and writes `out` (no
// partial rows in global memory, no fence, no arrival counter).
#pragma once

#include <cooperative_groups.h>

#include "kernels/attention/attention_device.cuh"

namespace vpod::attention::device {

// The split merge's arithmetic for one output row, in one pass over the
// splits in order with a running maximum: acc = sum_s 2^(lse_s - M) o_s over
// kCols columns, total = sum_s 2^(lse_s - M). `load(s, lse, v)` fetches split
// s's log-sum-exp and columns. The counter merge (rows in global memory) and
// the cluster merge (rows in the cluster's shared memory) both run it, with
// the roundings pinned (no contraction left to the compiler), so they give
// the same bits.
template <int kCols, typename Load>
__device__ __forceinline__ void merge_split_rows(int num_splits, Load&& load, float (&acc)[kCols],
                                                 float& running_max, float& total) {
#pragma unroll
  for (int i = 0; i < kCols; ++i) acc[i] = 0.f;
#pragma unroll 4
  for (int s = 0; s < num_splits; ++s) {
    float lse;
    float4 v[kCols / 4];
    load(s, lse, v);
    const float new_max = fmaxf(running_max, lse);
    const float base = new_max == -INFINITY ? 0.f : new_max;
    const float correction = exp2_approx(running_max - base);  // 2^-inf = 0 at the start
    const float w = exp2_approx(lse - base);
    running_max = new_max;
    total = __fmaf_rn(total, correction, w);
#pragma unroll
    for (int i = 0; i < kCols / 4; ++i) {
      acc[4 * i] = __fmaf_rn(w, v[i].x, __fmul_rn(acc[4 * i], correction));
      acc[4 * i + 1] = __fmaf_rn(w, v[i].y, __fmul_rn(acc[4 * i + 1], correction));
      acc[4 * i + 2] = __fmaf_rn(w, v[i].z, __fmul_rn(acc[4 * i + 2], correction));
      acc[4 * i + 3] = __fmaf_rn(w, v[i].w, __fmul_rn(acc[4 * i + 3], correction));
    }
  }
}

// Merges the fp32 partial rows of one output row over its KV splits
// (merge_split_rows; every split's log-sum-exp and row loaded together, no
// second round trip to L2), over columns [col0, col0 + kCols).
template <int kCols>
__device__ __forceinline__ void merge_partial_rows(const float* partial_o, const float* partial_lse,
                                                   const CombineItem& c, std::int64_t num_q_heads,
                                                   int head, int head_dim, int col0,
                                                   float (&acc)[kCols], float& running_max,
                                                   float& total) {
  merge_split_rows<kCols>(
      c.num_splits,
      [&](int s, float& lse, float4(&v)[kCols / 4]) {
        const std::int64_t prow =
            static_cast<std::int64_t>(c.partial_row + s * c.partial_stride) * num_q_heads + head;
        lse = __ldcg(partial_lse + prow);
        const float4* src = reinterpret_cast<const float4*>(partial_o + prow * head_dim + col0);
#pragma unroll
        for (int i = 0; i < kCols / 4; ++i) v[i] = __ldcg(src + i);
      },
      acc, running_max, total);
}

template <typename T, int kHeadDim>
struct DecodeHeadsTile {
  static constexpr int kRows = kDecodeRows;  // 16 query heads per unit
  static constexpr int kThreads = kAttentionThreads;
  static constexpr int kWarps = kThreads / 32;
  static_assert(kWarps == kDecodeHeadsPerCta, "one warp per unit");
  static constexpr int kKeys = 16;                    // keys per stage: one k step of P V
  static constexpr int kStages = 3 * 128 / kHeadDim;  // 96 KB of ring for 64 or 128 dims
  static constexpr int kKSteps = kHeadDim / 16;
  static constexpr int kDAtoms = kHeadDim / 8;
  static constexpr int kStageRows = kWarps * kKeys;
  static constexpr int kSmemKV = kStageRows * kHeadDim * 2;
  static constexpr int kSmemStage = 2 * kSmemKV;
  static constexpr int kSmemBytes = kStages * kSmemStage;
  using Tile = SwizzledTile<kHeadDim>;
  using E = ElementTraits<T>;
  static constexpr int kLoads = kStageRows * Tile::kRowChunks / kThreads;  // per thread
  static constexpr int kRowsPerPass = kThreads / Tile::kRowChunks;         // 8 or 16
  static_assert(kRowsPerPass % 8 == 0 && kKeys % kRowsPerPass == 0,
                "a thread keeps one chunk column and row phase, and a pass stays in one unit");

  // Per-thread load addressing, fixed for the item: stage row
  // row0 + i * kRowsPerPass is key key_of(i) of unit unit_of(i).
  static constexpr int unit_of(int i) { return i * kRowsPerPass / kKeys; }
  static constexpr int key_of(int i) { return i * kRowsPerPass % kKeys; }

  // Loads the 16 keys from `key0` of the CTA's units into ring stage `s_stage`.
  static __device__ __forceinline__ void load_stage(std::uint32_t s_stage, const KvAddressing& kv,
                                                    int slot, const int (&kv_head)[kWarps],
                                                    const std::int64_t (&head_off)[kWarps],
                                                    int key0, int kv_end, int row0, int chunk) {
    const T* k_base = static_cast<const T*>(kv.k);
    const T* v_base = static_cast<const T*>(kv.v);
    const std::uint32_t dst0 = s_stage + Tile::offset(row0, chunk);
    const std::int64_t base = static_cast<std::int64_t>(slot) * kv.outer_stride +
                              static_cast<std::int64_t>(key0 + row0) * kv.token_stride + chunk * 8;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const bool valid = kv_head[unit_of(i)] >= 0 && key0 + row0 + key_of(i) < kv_end;
      const std::int64_t offset =
          valid ? base + key_of(i) * kv.token_stride + head_off[unit_of(i)] : 0;
      const std::uint32_t dst = dst0 + i * kRowsPerPass * Tile::kRowBytes;
      cp_async_16(dst, k_base + offset, valid);
      cp_async_16(dst + kSmemKV, v_base + offset, valid);
    }
  }

  // The cluster merge's buffers in the ring: per warp 16 normalized fp32 rows
  // (row stride kMergeStride), then per (warp, row) the log2-sum-exp.
  static constexpr int kMergeStride = kHeadDim + 4;
  static_assert((kWarps * kRows * kMergeStride + 2 * kWarps * kRows) * 4 <= kSmemBytes,
                "the merge buffers fit in the ring");

  // Runs units [unit0, unit0 + kWarps) of decode item `item` (warps whose
  // unit is past num_kv_heads * decode_head_chunks only help load). The
  // caller owns `smem` (kSmemBytes, 128-byte aligned). kClusterMerge: the
  // item is one split of a cluster of S CTAs (see the top of this file).
  template <bool kClusterMerge = false>
  static __device__ void run(const AttentionParams& p, const DecodeWorkItem& item, int unit0,
                             char* smem, int tid) {
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int units = p.num_kv_heads * p.decode_head_chunks;
    const std::uint32_t s_ring = smem_addr(smem);
    const int row0 = tid / Tile::kRowChunks;
    const int chunk = tid % Tile::kRowChunks;
    int kv_head[kWarps];
    std::int64_t head_off[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int u = unit0 + w;
      kv_head[w] = u < units ? u / p.decode_head_chunks : -1;
      head_off[w] = static_cast<std::int64_t>(max(kv_head[w], 0)) * p.kv.head_stride;
    }
    const int num_blocks = (item.kv_end - item.kv_begin + kKeys - 1) / kKeys;
#pragma unroll
    for (int stage = 0; stage < kStages - 1; ++stage) {
      if (stage < num_blocks) {
        load_stage(s_ring + stage * kSmemStage, p.kv, item.slot, kv_head, head_off,
                   item.kv_begin + stage * kKeys, item.kv_end, row0, chunk);
      }
      cp_async_commit();
    }

    // This warp's unit: query heads [head0, head0 + rows).
    const int unit = unit0 + warp;
    const bool active = unit < units;
    const int head_chunk = unit % p.decode_head_chunks;
    const int head0 = (unit / p.decode_head_chunks) * p.group_size + head_chunk * kRows;
    const int rows = min(kRows, p.group_size - head_chunk * kRows);
    const int g = lane / 4;
    const int t = lane % 4;
    // Q straight into the A fragments: a0 = (g, 2t..), a1 = (g + 8, 2t..),
    // a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..) of each 16-column k step.
    std::uint32_t q_frag[kKSteps][4];
    {
      const T* q_rows = static_cast<const T*>(p.q) +
                        static_cast<std::int64_t>(item.token_offset) * p.q_token_stride +
                        static_cast<std::int64_t>(active ? head0 : 0) * kHeadDim + 2 * t;
      const bool lo = active && g < rows;
      const bool hi = active && g + 8 < rows;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        const T* r_lo = q_rows + g * kHeadDim + ks * 16;
        const T* r_hi = r_lo + 8 * kHeadDim;
        q_frag[ks][0] = lo ? *reinterpret_cast<const std::uint32_t*>(r_lo) : 0u;
        q_frag[ks][1] = hi ? *reinterpret_cast<const std::uint32_t*>(r_hi) : 0u;
        q_frag[ks][2] = lo ? *reinterpret_cast<const std::uint32_t*>(r_lo + 8) : 0u;
        q_frag[ks][3] = hi ? *reinterpret_cast<const std::uint32_t*>(r_hi + 8) : 0u;
      }
    }

    float o[kDAtoms][4];
#pragma unroll
    for (int d = 0; d < kDAtoms; ++d) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[d][e] = 0.f;
    }
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};
    const std::uint32_t k_lane = Tile::lane_offset((lane / 16) * 8 + (lane % 8), (lane / 8) % 2);
    const std::uint32_t v_lane = Tile::lane_offset(lane % 8 + ((lane / 8) % 2) * 8, lane / 16);

    for (int block = 0; block < num_blocks; ++block) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // stage landed; every warp is done with block - 1's stage
      {
        const int next = block + kStages - 1;
        if (next < num_blocks) {
          load_stage(s_ring + (next % kStages) * kSmemStage, p.kv, item.slot, kv_head, head_off,
                     item.kv_begin + next * kKeys, item.kv_end, row0, chunk);
        }
        cp_async_commit();
      }
      if (!active) continue;
      const std::uint32_t s_k_warp =
          s_ring + (block % kStages) * kSmemStage + warp * kKeys * Tile::kRowBytes;
      const std::uint32_t s_v_warp = s_k_warp + kSmemKV;

      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        std::uint32_t b[4];
        ldmatrix_x4(b, s_k_warp + Tile::at(k_lane, 0, ks * 2));
        const std::uint32_t b_lo[2] = {b[0], b[1]};
        const std::uint32_t b_hi[2] = {b[2], b[3]};
        E::mma(s[0], q_frag[ks], b_lo);
        E::mma(s[1], q_frag[ks], b_hi);
      }
      const int key0 = item.kv_begin + block * kKeys;
      if (key0 + kKeys > item.kv_end) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (key0 + j * 8 + t * 2 + (e & 1) >= item.kv_end) s[j][e] = -INFINITY;
          }
        }
      }

      // Online softmax (see prefill_tile.cuh for the -inf guard).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float block_max =
            fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
        block_max = quad_max(block_max) * p.scale_log2;
        const float new_max = fmaxf(row_max[h], block_max);
        const float base = new_max == -INFINITY ? 0.f : new_max;
        const float correction = exp2_approx(row_max[h] - base);
        row_max[h] = new_max;
        float sum = row_sum[h] * correction;
#pragma unroll
        for (int d = 0; d < kDAtoms; ++d) {
          o[d][2 * h] *= correction;
          o[d][2 * h + 1] *= correction;
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pr = exp2_approx(fmaf(s[j][2 * h + e], p.scale_log2, -base));
            s[j][2 * h + e] = pr;
            sum += pr;
          }
        }
        row_sum[h] = sum;
      }

      const std::uint32_t a[4] = {E::pack(s[0][0], s[0][1]), E::pack(s[0][2], s[0][3]),
                                  E::pack(s[1][0], s[1][1]), E::pack(s[1][2], s[1][3])};
#pragma unroll
      for (int np = 0; np < kDAtoms / 2; ++np) {
        std::uint32_t b[4];
        ldmatrix_x4_trans(b, s_v_warp + Tile::at(v_lane, 0, np * 2));
        const std::uint32_t b_lo[2] = {b[0], b[1]};
        const std::uint32_t b_hi[2] = {b[2], b[3]};
        E::mma(o[2 * np], a, b_lo);
        E::mma(o[2 * np + 1], a, b_hi);
      }
    }
    cp_async_wait<0>();
    if constexpr (kClusterMerge) {
      cluster_merge(p, item, active, head0, rows, o, row_max, row_sum, smem, lane, warp);
      return;
    }
    if (!active) return;

      // The warp's rows: normalized to `out`, or fp32 plus log-sum-exp to the
      // split's partial rows.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      const float sum = quad_sum(row_sum[h]);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      if (row >= rows) continue;
      if (item.partial_row < 0) {
        T* dst = static_cast<T*>(p.out) +
                 static_cast<std::int64_t>(item.token_offset) * p.out_token_stride +
                 static_cast<std::int64_t>(head0 + row) * kHeadDim + 2 * t;
#pragma unroll
        for (int d = 0; d < kDAtoms; ++d) {
          *reinterpret_cast<std::uint32_t*>(dst + d * 8) =
              E::pack(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
        }
      } else {
        const std::int64_t prow =
            static_cast<std::int64_t>(item.partial_row) * p.num_q_heads + head0 + row;
        float* dst = p.plan.partial_o + prow * kHeadDim + 2 * t;
#pragma unroll
        for (int d = 0; d < kDAtoms; ++d) {
          *reinterpret_cast<float2*>(dst + d * 8) =
              make_float2(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
        }
        if (t == 0) p.plan.partial_lse[prow] = sum > 0.f ? row_max[h] + __log2f(sum) : -INFINITY;
      }
    }
    if (item.partial_row < 0 || p.plan.decode_counters == nullptr) return;

    // Split merge, per warp: count in on the unit's arrival counter after the
    // partial rows are visible; the last split merges every split's rows and
    // resets the counter (graph replays start from zero).
    const CombineItem c = p.plan.decode_combines[item.combine];
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) {
      int* counter =
          p.plan.decode_counters + static_cast<std::int64_t>(item.combine) * units + unit;
      last = atomicAdd(counter, 1) == c.num_splits - 1;
      if (last) *counter = 0;
    }
    if (__shfl_sync(0xffffffffu, last, 0) == 0) return;
    __threadfence();  // see the other splits' rows
    constexpr int kLanesPerRow = 8;
    constexpr int kCols = kHeadDim / kLanesPerRow;  // 16 or 8
    const int col0 = (lane % kLanesPerRow) * kCols;
    for (int r0 = 0; r0 < rows; r0 += 32 / kLanesPerRow) {
      const int row = r0 + lane / kLanesPerRow;
      if (row >= rows) break;
      float acc[kCols];
      float running_max = -INFINITY, total = 0.f;
      merge_partial_rows<kCols>(p.plan.partial_o, p.plan.partial_lse, c,
                                static_cast<std::int64_t>(p.num_q_heads), head0 + row, kHeadDim,
                                col0, acc, running_max, total);
      const float inv = total > 0.f ? 1.f / total : 0.f;
      T* dst = static_cast<T*>(p.out) + static_cast<std::int64_t>(c.token) * p.out_token_stride +
               static_cast<std::int64_t>(head0 + row) * kHeadDim + col0;
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
  }

  static __device__ __forceinline__ void cluster_merge(
      const AttentionParams& p, const DecodeWorkItem& item, bool active, int head0, int rows,
      const float (&o)[kDAtoms][4], const float (&row_max)[2], const float (&row_sum)[2],
      char* smem, int lane, int warp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    using E = ElementTraits<T>;
    auto merge_o = [](char* base, int w) {
      return reinterpret_cast<float*>(base) + w * kRows * kMergeStride;
    };
    auto merge_lse = [](char* base, int w) {
      return reinterpret_cast<float*>(base) + kWarps * kRows * kMergeStride + w * kRows;
    };
    __syncthreads();  // every warp is done with the ring: it becomes the merge buffers
    // This split's normalized rows and log-sum-exp, the values the counter
    // merge writes as partial rows.
    const int g = lane / 4;
    const int t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      const float sum = quad_sum(row_sum[h]);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      float* dst = merge_o(smem, warp) + row * kMergeStride + 2 * t;
#pragma unroll
      for (int d = 0; d < kDAtoms; ++d) {
        *reinterpret_cast<float2*>(dst + d * 8) =
            make_float2(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
      }
      if (t == 0) merge_lse(smem, warp)[row] = sum > 0.f ? row_max[h] + __log2f(sum) : -INFINITY;
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's rows are written (release / acquire)
    const int splits = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    // This CTA's rows of the warp's unit: rank, rank + splits, ...; 8 lanes
    // per row (kCols columns each), 4 rows per pass; splits merged in order
    // as by the counter merge (merge_split_rows).
    constexpr int kLanesPerRow = 8;
    constexpr int kCols = kHeadDim / kLanesPerRow;
    const int col0 = (lane % kLanesPerRow) * kCols;
    const int my_rows = active && rank < rows ? (rows - rank + splits - 1) / splits : 0;
    for (int k = lane / kLanesPerRow; k < my_rows; k += 32 / kLanesPerRow) {
      const int row = rank + k * splits;
      float acc[kCols];
      float running_max = -INFINITY, total = 0.f;
      merge_split_rows<kCols>(
          splits,
          [&](int s, float& lse, float4(&v)[kCols / 4]) {
            char* remote = cluster.map_shared_rank(smem, s);
            lse = merge_lse(remote, warp)[row];
            const float4* src =
                reinterpret_cast<const float4*>(merge_o(remote, warp) + row * kMergeStride + col0);
#pragma unroll
            for (int i = 0; i < kCols / 4; ++i) v[i] = src[i];
          },
          acc, running_max, total);
      const float inv = total > 0.f ? 1.f / total : 0.f;
      T* dst = static_cast<T*>(p.out) +
               static_cast<std::int64_t>(item.token_offset) * p.out_token_stride +
               static_cast<std::int64_t>(head0 + row) * kHeadDim + col0;
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
    cluster.sync();  // the other CTAs are done reading this one's shared memory
#else
    (void)p, (void)item, (void)active, (void)head0, (void)rows, (void)o, (void)row_max,
        (void)row_sum, (void)smem, (void)lane, (void)warp;
    __trap();  // launched only where the device runs the sm_90 code
#endif
  }
};

}  // namespace vpod::attention::device
