// The decode tile: flash-decoding for one sequence's single query, all (up to
// 16) query heads of one KV head packed into the 16 rows of an mma tile, so
// each K/V byte is read once per group. A device function for a whole CTA of
// 4 warps and DecodeTile::kSmemBytes of shared memory: the decode kernels run
// it, and so do POD's decode CTAs (pod_kernel.cuh).
//
// Keys stream through a kStages-deep cp.async pipeline (3 stages, two CTAs per
// SM; the deep decode kernel, decode_deep.cu, instantiates more stages for one
// CTA per SM) in blocks of 16 keys per warp (64 for 4 warps); warp w takes
// keys [16w, 16w+16) of each block and keeps its own online softmax (S = Q K^T
// and O += P V on mma.sync, Q held in registers). At the end the warps'
// partial results are merged through shared memory (the tile meets at
// __syncthreads).
//
// Output: normalized rows to `out`, or for one KV split, fp32 normalized rows
// plus their log2-sum-exp to the partials.
#pragma once

#include "kernels/attention/attention_device.cuh"

namespace vpod::attention::device {

template <typename T, int kHeadDim, int kPipelineStages = 3>
struct DecodeTile {
  static constexpr int kRows = kDecodeRows;  // 16 query heads
  static constexpr int kWarps = kAttentionThreads / 32;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpKeys = 16;
  static constexpr int kBlockN = kWarpKeys * kWarps;  // kDecodeBlockN for 4 warps
  static constexpr int kStages = kPipelineStages;
  static_assert(kDecodeBlockN % kBlockN == 0, "plan splits must start on a key block");
  static_assert(kStages >= 2 && kStages <= 8, "cp.async groups in flight: 1..7");
  static constexpr int kKSteps = kHeadDim / 16;
  static constexpr int kDAtoms = kHeadDim / 8;
  static constexpr int kSmemQ = kRows * kHeadDim * 2;
  static constexpr int kSmemKV = kBlockN * kHeadDim * 2;
  static constexpr int kSmemStage = 2 * kSmemKV;
  // Cross-warp merge: per warp 16 rows of fp32 O (padded rows) plus max and sum.
  static constexpr int kMergeStride = kHeadDim + 4;
  static constexpr int kSmemMerge = (kWarps * kRows * kMergeStride + 2 * kWarps * kRows) * 4;
  static constexpr int kSmemPipeline =
      kStages * kSmemStage > kSmemMerge ? kStages* kSmemStage : kSmemMerge;
  static constexpr int kSmemBytes = kSmemQ + kSmemPipeline;
  using Tile = SwizzledTile<kHeadDim>;
  using E = ElementTraits<T>;

  // Loads key block [key0, key0 + kBlockN) of K and V into a pipeline stage.
  static __device__ __forceinline__ void load_stage(std::uint32_t s_stage, const KvAddressing& kv,
                                                    int slot, int kv_head, int key0, int kv_end,
                                                    int tid) {
    const T* k_base = static_cast<const T*>(kv.k);
    const T* v_base = static_cast<const T*>(kv.v);
    constexpr int kChunks = kBlockN * Tile::kRowChunks;
    static_assert(kChunks % kThreads == 0, "key block chunks must divide among the threads");
    constexpr int kRowsPerPass = kThreads / Tile::kRowChunks;
    const int row0 = tid / Tile::kRowChunks;
    const int chunk = tid % Tile::kRowChunks;
    if constexpr (kRowsPerPass % 8 != 0) {
      // Fewer threads than 8 rows of chunks (2 warps, head dim 128): the
      // swizzle phase changes from pass to pass.
#pragma unroll
      for (int i = 0; i < kChunks / kThreads; ++i) {
        const int row = row0 + i * kRowsPerPass;
        const bool valid = key0 + row < kv_end;
        const std::int64_t offset =
            valid ? kv_offset(kv, slot, key0 + row, kv_head) + chunk * 8 : 0;
        const std::uint32_t dst = s_stage + Tile::offset(row, chunk);
        cp_async_16(dst, k_base + offset, valid);
        cp_async_16(dst + kSmemKV, v_base + offset, valid);
      }
      return;
    }
    const std::uint32_t dst0 = s_stage + Tile::offset(row0, chunk);
    // One offset for this thread's first row, then a fixed stride per row
    // (no per-row index math).
    const std::int64_t base = static_cast<std::int64_t>(slot) * kv.outer_stride +
                              static_cast<std::int64_t>(kv_head) * kv.head_stride +
                              static_cast<std::int64_t>(key0 + row0) * kv.token_stride + chunk * 8;
    const std::int64_t step = static_cast<std::int64_t>(kRowsPerPass) * kv.token_stride;
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
      const bool valid = key0 + row0 + i * kRowsPerPass < kv_end;
      const std::int64_t offset = valid ? base + i * step : 0;
      const std::uint32_t dst = dst0 + i * kRowsPerPass * Tile::kRowBytes;
      cp_async_16(dst, k_base + offset, valid);
      cp_async_16(dst + kSmemKV, v_base + offset, valid);
    }
  }

  // Runs one tile: the query heads [kv_head * group + 16 * head_chunk, +16) of
  // decode item `item`, on the CTA's threads tid in [0, kThreads). The caller
  // owns `smem` (kSmemBytes, 128-byte aligned) and must synchronize the CTA
  // before reusing it.
  static __device__ void run(const AttentionParams& p, const DecodeWorkItem& item, int kv_head,
                             int head_chunk, char* smem, int tid) {
    accumulate(p, item, kv_head, head_chunk, smem, tid);
    __syncthreads();
    merge_and_write(p, item, kv_head, head_chunk, smem, tid);
  }

  // The merge buffers accumulate() leaves in shared memory: per warp, 16 rows
  // of unnormalized fp32 O (row stride kMergeStride), and per (warp, row) the
  // log2-domain running maximum and the row sum.
  static __device__ __forceinline__ float* merge_o(char* smem) {
    return reinterpret_cast<float*>(smem + kSmemQ);  // [warp][row][kMergeStride]
  }
  static __device__ __forceinline__ float* merge_max(char* smem) {
    return merge_o(smem) + kWarps * kRows * kMergeStride;  // [warp][row]
  }
  static __device__ __forceinline__ float* merge_sum(char* smem) {
    return merge_max(smem) + kWarps * kRows;  // [warp][row]
  }

  // The cluster merge's copy of this split's rows (decode_cluster.cu): the
  // normalized fp32 rows [kRows][kHeadDim] and their log2-sum-exp [kRows]
  // that the counter merge writes as partial rows, after the merge buffers.
  static constexpr int kSmemSplitRows = (kRows * kHeadDim + kRows) * 4;
  static_assert(kSmemMerge + kSmemSplitRows <= kSmemPipeline, "split rows fit in the pipeline");
  static __device__ __forceinline__ float* split_o(char* smem) {
    return reinterpret_cast<float*>(smem + kSmemQ + kSmemMerge);
  }
  static __device__ __forceinline__ float* split_lse(char* smem) {
    return split_o(smem) + kRows * kHeadDim;
  }

  // The main loop of run(): streams the item's keys and leaves each warp's
  // partial result in the merge buffers. The caller synchronizes (the tile,
  // or the cluster for decode_cluster_kernel) before anyone reads them.
  static __device__ __forceinline__ void accumulate(const AttentionParams& p,
                                                    const DecodeWorkItem& item, int kv_head,
                                                    int head_chunk, char* smem, int tid) {
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int head0 = kv_head * p.group_size + head_chunk * kRows;
    const int rows = min(kRows, p.group_size - head_chunk * kRows);
    const std::uint32_t s_q = smem_addr(smem);
    const std::uint32_t s_pipe = s_q + kSmemQ;

    // The query heads are consecutive rows of D elements.
    const T* q_rows = static_cast<const T*>(p.q) +
                      static_cast<std::int64_t>(item.token_offset) * p.q_token_stride +
                      static_cast<std::int64_t>(head0) * kHeadDim;
    load_tile_async<kRows, kHeadDim, kThreads>(s_q, tid, p.q, [&](int row) -> const void* {
      return row < rows ? q_rows + row * kHeadDim : nullptr;
    });
    const int num_blocks = (item.kv_end - item.kv_begin + kBlockN - 1) / kBlockN;
#pragma unroll
    for (int stage = 0; stage < kStages - 1; ++stage) {
      if (stage < num_blocks) {
        load_stage(s_pipe + stage * kSmemStage, p.kv, item.slot, kv_head,
                   item.kv_begin + stage * kBlockN, item.kv_end, tid);
      }
      cp_async_commit();  // the Q tile rides in the first group
    }
    cp_async_wait<kStages - 2>();
    __syncthreads();
    std::uint32_t q_frag[kKSteps][4];
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      ldmatrix_x4(q_frag[ks], s_q + Tile::at(Tile::lane_offset(lane % 16, lane / 16), 0, ks * 2));
    }

    float o[kDAtoms][4];
#pragma unroll
    for (int d = 0; d < kDAtoms; ++d) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[d][e] = 0.f;
    }
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.f, 0.f};
    // ldmatrix lane offsets (see SwizzledTile::at).
    const std::uint32_t k_lane = Tile::lane_offset((lane / 16) * 8 + (lane % 8), (lane / 8) % 2);
    const std::uint32_t v_lane = Tile::lane_offset(lane % 8 + ((lane / 8) % 2) * 8, lane / 16);

    for (int block = 0; block < num_blocks; ++block) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // block landed; every warp is done with block - 1's stage
      {
        const int next = block + kStages - 1;
        if (next < num_blocks) {
          load_stage(s_pipe + (next % kStages) * kSmemStage, p.kv, item.slot, kv_head,
                     item.kv_begin + next * kBlockN, item.kv_end, tid);
        }
        cp_async_commit();
      }
      // This warp's 16 keys of the stage's K and V tiles.
      const std::uint32_t s_k_warp =
          s_pipe + (block % kStages) * kSmemStage + warp * kWarpKeys * Tile::kRowBytes;
      const std::uint32_t s_v_warp = s_k_warp + kSmemKV;

      // S = Q K^T for this warp's 16 keys: two n8 atoms.
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
      const int key0 = item.kv_begin + block * kBlockN + warp * kWarpKeys;
      if (key0 + kWarpKeys > item.kv_end) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (key0 + j * 8 + (lane % 4) * 2 + (e & 1) >= item.kv_end) s[j][e] = -INFINITY;
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

      // O += P V over this warp's 16 keys.
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
    __syncthreads();  // the pipeline's shared memory becomes the merge buffer

    // Each warp's rows to the merge buffers (see merge_and_write).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane / 4 + 8 * h;
      float* dst = merge_o(smem) + (warp * kRows + row) * kMergeStride + (lane % 4) * 2;
#pragma unroll
      for (int d = 0; d < kDAtoms; ++d) {
        *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * h], o[d][2 * h + 1]);
      }
      const float sum = quad_sum(row_sum[h]);
      if (lane % 4 == 0) {
        merge_max(smem)[warp * kRows + row] = row_max[h];
        merge_sum(smem)[warp * kRows + row] = sum;
      }
    }
  }

  // The final merge's thread layout: kThreadsPerRow threads per row (8 for 4
  // warps), kColsPerThread columns each.
  static constexpr int kThreadsPerRow = kThreads / kRows;
  static constexpr int kColsPerThread = kHeadDim / kThreadsPerRow;
  static_assert(kColsPerThread % 8 == 0, "a thread writes whole 16-byte chunks");

  // This thread's part of the warps' merge (after accumulate and the tile's
  // sync): row tid / kThreadsPerRow, columns from (tid %
  // kThreadsPerRow) * kColsPerThread. O = sum_w 2^(m_w - M) O_w / sum_w
  // 2^(m_w - M) l_w, normalized into `acc`; M and the sum for the
  // log-sum-exp.
  static __device__ __forceinline__ void merge_warps(char* smem, int tid,
                                                     float (&acc)[kColsPerThread],
                                                     float& overall_max, float& total) {
    const float* merge_o = DecodeTile::merge_o(smem);
    const float* merge_max = DecodeTile::merge_max(smem);
    const float* merge_sum = DecodeTile::merge_sum(smem);
    const int row = tid / kThreadsPerRow;
    const int col0 = (tid % kThreadsPerRow) * kColsPerThread;
    overall_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) overall_max = fmaxf(overall_max, merge_max[w * kRows + row]);
    const float base = overall_max == -INFINITY ? 0.f : overall_max;
    float weight[kWarps];
    total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = exp2_approx(merge_max[w * kRows + row] - base);
      total += weight[w] * merge_sum[w * kRows + row];
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;
#pragma unroll
    for (int c = 0; c < kColsPerThread; c += 4) {
      float4 sum4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float4 v =
            *reinterpret_cast<const float4*>(merge_o + (w * kRows + row) * kMergeStride + col0 + c);
        sum4.x += weight[w] * v.x;
        sum4.y += weight[w] * v.y;
        sum4.z += weight[w] * v.z;
        sum4.w += weight[w] * v.w;
      }
      acc[c] = sum4.x * inv;
      acc[c + 1] = sum4.y * inv;
      acc[c + 2] = sum4.z * inv;
      acc[c + 3] = sum4.w * inv;
    }
  }

  // Merges the warps' buffers (merge_warps, after accumulate and the tile's
  // sync) into normalized rows to `out`, or for one KV split fp32
  // rows plus their log2-sum-exp to the partials.
  static __device__ __forceinline__ void merge_and_write(const AttentionParams& p,
                                                         const DecodeWorkItem& item, int kv_head,
                                                         int head_chunk, char* smem, int tid) {
    const int head0 = kv_head * p.group_size + head_chunk * kRows;
    const int rows = min(kRows, p.group_size - head_chunk * kRows);
    const int row = tid / kThreadsPerRow;
    const int col0 = (tid % kThreadsPerRow) * kColsPerThread;
    float acc[kColsPerThread];
    float overall_max, total;
    merge_warps(smem, tid, acc, overall_max, total);
    if (row >= rows) return;
    if (item.partial_row < 0) {
      T* dst = static_cast<T*>(p.out) +
               static_cast<std::int64_t>(item.token_offset) * p.out_token_stride +
               static_cast<std::int64_t>(head0 + row) * kHeadDim + col0;
#pragma unroll
      for (int c = 0; c < kColsPerThread; c += 8) {
        uint4 packed;
        packed.x = E::pack(acc[c], acc[c + 1]);
        packed.y = E::pack(acc[c + 2], acc[c + 3]);
        packed.z = E::pack(acc[c + 4], acc[c + 5]);
        packed.w = E::pack(acc[c + 6], acc[c + 7]);
        *reinterpret_cast<uint4*>(dst + c) = packed;
      }
    } else {
      const std::int64_t prow =
          static_cast<std::int64_t>(item.partial_row) * p.num_q_heads + head0 + row;
      float* dst = p.plan.partial_o + prow * kHeadDim + col0;
#pragma unroll
      for (int c = 0; c < kColsPerThread; c += 4) {
        *reinterpret_cast<float4*>(dst + c) =
            make_float4(acc[c], acc[c + 1], acc[c + 2], acc[c + 3]);
      }
      if (tid % kThreadsPerRow == 0) {
        p.plan.partial_lse[prow] = total > 0.f ? overall_max + __log2f(total) : -INFINITY;
      }
    }
  }
};

}  // namespace vpod::attention::device
