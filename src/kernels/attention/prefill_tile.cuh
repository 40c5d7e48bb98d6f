// The prefill tile: FlashAttention-2 forward for 128 query rows of one head
// over a range of keys, as a device function a kernel (or the fused POD
// kernel) calls with 128 threads and PrefillTile::kSmemBytes of shared memory.
//
// Shape: 4 warps, warp w owns query rows [32w, 32w+32) (two m16 atoms), keys
// move through shared memory in blocks of 64. Per key block:
//   S = Q K^T (mma.sync, Q and K from swizzled shared memory via ldmatrix),
//   causal / range mask, online softmax in registers (log2 domain, FFMA+ex2),
//   O += P V with P kept in registers as the A operand.
// Copies overlap compute FlashAttention-2 style: V[n] loads during Q K[n]^T,
// K[n-1] loads during softmax and P V[n]. Key blocks are visited from the
// last to the first, so only the first one or two visited blocks need masks.
//
// Output: normalized rows to `out` (dtype), or, for one KV split of the tile,
// fp32 normalized rows plus their log2-sum-exp to the partial buffers.
#pragma once

#include "kernels/attention/attention_device.cuh"

namespace vpod::attention::device {

template <typename T, int kHeadDim>
struct PrefillTile {
  static constexpr int kBlockM = kPrefillBlockM;
  static constexpr int kBlockN = kPrefillBlockN;
  static constexpr int kThreads = kAttentionThreads;
  static constexpr int kWarpRows = kBlockM / (kThreads / 32);  // 32
  static constexpr int kMAtoms = kWarpRows / 16;               // 2
  static constexpr int kNAtoms = kBlockN / 8;                  // S atoms per m atom: 8
  static constexpr int kDAtoms = kHeadDim / 8;                 // O atoms per m atom
  static constexpr int kKSteps = kHeadDim / 16;                // k steps of Q K^T
  static constexpr int kPSteps = kBlockN / 16;                 // k steps of P V
  static constexpr int kSmemQ = kBlockM * kHeadDim * 2;
  static constexpr int kSmemKV = kBlockN * kHeadDim * 2;
  static constexpr int kSmemBytes = kSmemQ + 2 * kSmemKV;
  using Tile = SwizzledTile<kHeadDim>;
  using E = ElementTraits<T>;
  static_assert(kMAtoms * 16 * (kThreads / 32) == kBlockM, "warps must cover the Q tile");

  // Loads key block `block` (K or V) of (slot, kv_head); keys >= kv_end are zero-filled.
  static __device__ __forceinline__ void load_keys(std::uint32_t dst, const T* base,
                                                   const KvAddressing& kv, int slot, int kv_head,
                                                   int block, int kv_end, int tid) {
    const int key0 = block * kBlockN;
    load_tile_async<kBlockN, kHeadDim, kThreads>(dst, tid, base, [&](int row) -> const void* {
      const int key = key0 + row;
      return key < kv_end ? base + kv_offset(kv, slot, key, kv_head) : nullptr;
    });
  }

  // Runs one tile. The caller owns `smem` (kSmemBytes, 128-byte aligned) and
  // must __syncthreads() before reusing it for another tile.
  static __device__ void run(const AttentionParams& p, const PrefillWorkItem& item, int q_head,
                             char* smem, int tid) {
    const int warp = tid / 32;
    const int lane = tid % 32;
    const SequenceDesc seq = p.plan.prefill_seqs[item.seq];
    const int kv_head = q_head / p.group_size;
    const int num_rows = min(kBlockM, seq.num_new - item.q_begin);
    const std::uint32_t s_q = smem_addr(smem);
    const std::uint32_t s_k = s_q + kSmemQ;
    const std::uint32_t s_v = s_k + kSmemKV;
    const T* k_base = static_cast<const T*>(p.kv.k);
    const T* v_base = static_cast<const T*>(p.kv.v);

    // Q tile (rows past the chunk are zero) and the last key block.
    const T* q_tile =
        static_cast<const T*>(p.q) +
        static_cast<std::int64_t>(seq.token_offset + item.q_begin) * p.q_token_stride +
        static_cast<std::int64_t>(q_head) * kHeadDim;
    load_tile_async<kBlockM, kHeadDim, kThreads>(s_q, tid, p.q, [&](int row) -> const void* {
      return row < num_rows ? q_tile + row * p.q_token_stride : nullptr;
    });
    const int block_min = item.kv_begin / kBlockN;
    const int block_end = (item.kv_end + kBlockN - 1) / kBlockN;
    load_keys(s_k, k_base, p.kv, seq.slot, kv_head, block_end - 1, item.kv_end, tid);
    cp_async_commit();

    float o[kMAtoms][kDAtoms][4];
    float row_max[kMAtoms][2];  // running max of the scaled scores (log2 domain)
    float row_sum[kMAtoms][2];  // this thread's part of the running sum of exp2
#pragma unroll
    for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
      for (int d = 0; d < kDAtoms; ++d) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mi][d][e] = 0.f;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mi][h] = -INFINITY;
        row_sum[mi][h] = 0.f;
      }
    }
    const int warp_row0 = warp * kWarpRows;
    // ldmatrix lane offsets (see SwizzledTile::at): Q rows of this warp, K as
    // the B operand of Q K^T, V (transposed) as the B operand of P V.
    const std::uint32_t s_q_warp = s_q + warp_row0 * Tile::kRowBytes;
    const std::uint32_t q_lane = Tile::lane_offset(lane % 16, lane / 16);
    const std::uint32_t k_lane = Tile::lane_offset((lane / 16) * 8 + (lane % 8), (lane / 8) % 2);
    const std::uint32_t v_lane = Tile::lane_offset(lane % 8 + ((lane / 8) % 2) * 8, lane / 16);
    // Tile row r attends to keys <= causal_row0 + r.
    const int causal_row0 = seq.cached_len + item.q_begin;

    for (int block = block_end - 1; block >= block_min; --block) {
      cp_async_wait<0>();
      __syncthreads();  // K[block] landed; every warp is done with V[block+1]
      load_keys(s_v, v_base, p.kv, seq.slot, kv_head, block, item.kv_end, tid);
      cp_async_commit();

      // S = Q K^T: [32 rows of this warp] x [64 keys]
      float s[kMAtoms][kNAtoms][4];
#pragma unroll
      for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
        for (int j = 0; j < kNAtoms; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mi][j][e] = 0.f;
        }
      }
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        std::uint32_t a[kMAtoms][4];
#pragma unroll
        for (int mi = 0; mi < kMAtoms; ++mi) {
          ldmatrix_x4(a[mi], s_q_warp + Tile::at(q_lane, mi * 16, ks * 2));
        }
#pragma unroll
        for (int np = 0; np < kNAtoms / 2; ++np) {
          std::uint32_t b[4];
          ldmatrix_x4(b, s_k + Tile::at(k_lane, np * 16, ks * 2));
          const std::uint32_t b_lo[2] = {b[0], b[1]};
          const std::uint32_t b_hi[2] = {b[2], b[3]};
#pragma unroll
          for (int mi = 0; mi < kMAtoms; ++mi) {
            E::mma(s[mi][2 * np], a[mi], b_lo);
            E::mma(s[mi][2 * np + 1], a[mi], b_hi);
          }
        }
      }

      // Mask keys past the split's end and above the causal diagonal.
      const int key0 = block * kBlockN;
      if (key0 + kBlockN > item.kv_end || key0 + kBlockN - 1 > causal_row0 + warp_row0) {
#pragma unroll
        for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
          for (int j = 0; j < kNAtoms; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = warp_row0 + mi * 16 + lane / 4 + 8 * (e / 2);
              const int key = key0 + j * 8 + (lane % 4) * 2 + (e & 1);
              if (key >= item.kv_end || key > causal_row0 + row) s[mi][j][e] = -INFINITY;
            }
          }
        }
      }

      // Online softmax. A row with every key masked so far keeps max -inf; it
      // subtracts 0 instead, so no -inf - -inf NaN appears. The max moves
      // only past p.max_slack, and a warp whose rows all kept theirs skips
      // O's rescale (a correction of exactly 1).
#pragma unroll
      for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float block_max = -INFINITY;
#pragma unroll
          for (int j = 0; j < kNAtoms; ++j) {
            block_max = fmaxf(block_max, fmaxf(s[mi][j][2 * h], s[mi][j][2 * h + 1]));
          }
          block_max = quad_max(block_max) * p.scale_log2;
          const float new_max =
              block_max > row_max[mi][h] + p.max_slack ? block_max : row_max[mi][h];
          const float base = new_max == -INFINITY ? 0.f : new_max;
          const float correction = exp2_approx(row_max[mi][h] - base);
          row_max[mi][h] = new_max;
          float sum = row_sum[mi][h] * correction;
          if (__any_sync(0xffffffffu, correction != 1.f)) {
#pragma unroll
            for (int d = 0; d < kDAtoms; ++d) {
              o[mi][d][2 * h] *= correction;
              o[mi][d][2 * h + 1] *= correction;
            }
          }
#pragma unroll
          for (int j = 0; j < kNAtoms; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pr = exp2_approx(fmaf(s[mi][j][2 * h + e], p.scale_log2, -base));
              s[mi][j][2 * h + e] = pr;
              sum += pr;
            }
          }
          row_sum[mi][h] = sum;
        }
      }

      // P's accumulator layout is the A operand layout (16 keys per k step);
      // packing it first frees the fp32 scores before the next K load is issued.
      std::uint32_t pa[kPSteps][kMAtoms][4];
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
#pragma unroll
        for (int mi = 0; mi < kMAtoms; ++mi) {
          pa[kk][mi][0] = E::pack(s[mi][2 * kk][0], s[mi][2 * kk][1]);
          pa[kk][mi][1] = E::pack(s[mi][2 * kk][2], s[mi][2 * kk][3]);
          pa[kk][mi][2] = E::pack(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
          pa[kk][mi][3] = E::pack(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
        }
      }

      cp_async_wait<0>();
      __syncthreads();  // V[block] landed; every warp is done with K[block]
      if (block > block_min) {
        load_keys(s_k, k_base, p.kv, seq.slot, kv_head, block - 1, item.kv_end, tid);
        cp_async_commit();
      }

      // O += P V.
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
#pragma unroll
        for (int np = 0; np < kDAtoms / 2; ++np) {
          std::uint32_t b[4];
          ldmatrix_x4_trans(b, s_v + Tile::at(v_lane, kk * 16, np * 2));
          const std::uint32_t b_lo[2] = {b[0], b[1]};
          const std::uint32_t b_hi[2] = {b[2], b[3]};
#pragma unroll
          for (int mi = 0; mi < kMAtoms; ++mi) {
            E::mma(o[mi][2 * np], pa[kk][mi], b_lo);
            E::mma(o[mi][2 * np + 1], pa[kk][mi], b_hi);
          }
        }
      }
    }

#pragma unroll
    for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) row_sum[mi][h] = quad_sum(row_sum[mi][h]);
    }

    if (item.partial_row < 0) {
      store_output(p, seq, item, q_head, o, row_sum, smem, warp, lane, num_rows);
    } else {
      // One KV split: fp32 normalized rows and their log2-sum-exp.
#pragma unroll
      for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = warp_row0 + mi * 16 + lane / 4 + 8 * h;
          if (row >= num_rows) continue;
          const float sum = row_sum[mi][h];
          const float inv = sum > 0.f ? 1.f / sum : 0.f;
          const std::int64_t prow =
              static_cast<std::int64_t>(item.partial_row + row) * p.num_q_heads + q_head;
          float* dst = p.plan.partial_o + prow * kHeadDim + (lane % 4) * 2;
#pragma unroll
          for (int d = 0; d < kDAtoms; ++d) {
            *reinterpret_cast<float2*>(dst + d * 8) =
                make_float2(o[mi][d][2 * h] * inv, o[mi][d][2 * h + 1] * inv);
          }
          if (lane % 4 == 0) {
            p.plan.partial_lse[prow] = sum > 0.f ? row_max[mi][h] + __log2f(sum) : -INFINITY;
          }
        }
      }
    }
  }

  // Normalizes, converts to T, stages this warp's 32 rows in its own rows of
  // the Q tile (no other warp reads them) and writes them with 16-byte stores.
  static __device__ __forceinline__ void store_output(const AttentionParams& p,
                                                      const SequenceDesc& seq,
                                                      const PrefillWorkItem& item, int q_head,
                                                      float (&o)[kMAtoms][kDAtoms][4],
                                                      float (&row_sum)[kMAtoms][2], char* smem,
                                                      int warp, int lane, int num_rows) {
    const int warp_row0 = warp * kWarpRows;
    __syncwarp();
#pragma unroll
    for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sum = row_sum[mi][h];
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int row = warp_row0 + mi * 16 + lane / 4 + 8 * h;
#pragma unroll
        for (int d = 0; d < kDAtoms; ++d) {
          const int col = d * 8 + (lane % 4) * 2;
          *reinterpret_cast<std::uint32_t*>(smem + Tile::offset(row, col / 8) + (col % 8) * 2) =
              E::pack(o[mi][d][2 * h] * inv, o[mi][d][2 * h + 1] * inv);
        }
      }
    }
    __syncwarp();
    constexpr int kRowsPerPass = 32 / Tile::kRowChunks;
    T* out_tile = static_cast<T*>(p.out) +
                  static_cast<std::int64_t>(seq.token_offset + item.q_begin) * p.out_token_stride +
                  static_cast<std::int64_t>(q_head) * kHeadDim;
#pragma unroll
    for (int pass = 0; pass < kWarpRows / kRowsPerPass; ++pass) {
      const int row = warp_row0 + pass * kRowsPerPass + lane / Tile::kRowChunks;
      const int chunk = lane % Tile::kRowChunks;
      if (row < num_rows) {
        *reinterpret_cast<uint4*>(out_tile + row * p.out_token_stride + chunk * 8) =
            *reinterpret_cast<const uint4*>(smem + Tile::offset(row, chunk));
      }
    }
  }
};

}  // namespace vpod::attention::device
