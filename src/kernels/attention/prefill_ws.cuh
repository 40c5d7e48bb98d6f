// The warp-specialized sm_90a prefill kernel (FlashAttention-3's design):
//
//   warpgroup 0, the producer: one warp streams each tile's Q and its K/V
//     blocks (128 keys) into shared memory with TMA, K and V in two-stage
//     rings guarded by mbarriers (full: the bytes landed; empty: both
//     consumers are done with the stage). It gives its registers away
//     (setmaxnreg.dec) to
//   warpgroups 1 and 2, the consumers: each owns 64 of the tile's 128 query
//     rows and runs the online softmax over the key blocks, last to first.
//
// Per key block j a consumer issues S_j = Q K_j^T and O += P_{j+1} V_{j+1}
// back to back, then runs the softmax of S_j while P V is still on the tensor
// cores (O takes the softmax's correction at the next issue, while that S
// runs): the two products of one warpgroup overlap its own softmax. Across the two warpgroups a
// pair of named barriers makes them take turns issuing (ping-pong), so one's softmax runs while the
// other's products occupy the tensor cores.
//
// The kernel is persistent: one CTA per SM walks the (work item, query head)
// tiles in rounds (tile_of_round) over the plan's order, item-major longest
// first or head-major when the items cost alike (tile_at), so
// the producer loads tile t + 1's Q and first blocks while the consumers
// finish tile t. Causal masking runs only on blocks that cross the diagonal or
// the split's end; blocks entirely above the diagonal are never visited
// (kv_end is clipped by the planner).
//
// GQA packing (PrefillWorkItem::pack = group size, for a work item of at most
// 128 / group query rows: a short chunk, such as a conversation's next turn
// over its cached context): a tile holds the item's tokens for all the query
// heads of one KV head, row r = (token r / group, head r % group), Q loaded as
// one box of group heads x 128 / group tokens. One CTA then reads each K/V
// block once for the group instead of once per query head. The rows'
// arithmetic is unchanged (a row never meets another), so packed and one-head
// tiles give the same bits. When every item packs (AttentionParams::ws_pack)
// the walk is uniform; when only some do (ws_mixed: short turns beside a long
// chunk) each item has its own tile count and the walk finds a tile's item by
// its first tile (PrefillWorkItem::ws_tile).
//
// K/V multicast (kCluster 2, the launcher's choice on one-head walks with an
// even group): two CTAs of a cluster run query heads 2k and 2k + 1 of one item
// and each loads half of every whole K/V block into both (see PrefillWsTile);
// the pairs always walk item-major.
//
// K/V come from the virtual KV tensor through the layer's TMA descriptors
// (boxes of 64 dims x 64 tokens, two per 128-key block per 64-dim column).
// The block holding the split's last key, when partial, is loaded with
// cp.async by the producer warp instead: keys past kv_end read as zero (V
// there may be unmapped pages or NaN poison), never through TMA.
//
// Shared memory (head dim 128): Q 32 KB, K and V 2 x 2 x 32 KB, the output
// staging tile 32 KB, the mbarriers: 194 KB, one CTA per SM. The layouts are
// the wgmma tile's (prefill_wgmma.cuh): 64-element column blocks of [rows][128
// B] with the 128-byte swizzle.
#pragma once

#include "kernels/attention/prefill_wgmma.cuh"

namespace vpod::attention::device {

namespace ws {

// Named barriers (0 is __syncthreads): the two consumers' issue turns, and
// each consumer's epilogue.
inline constexpr int kTurnBarrier0 = 1;
inline constexpr int kEpilogueBarrier0 = 3;

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const void* map, std::uint32_t bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// The same box into the same shared-memory offset of every CTA in `mask`
// (bit = rank in the cluster), completing bytes on the barrier at `bar`'s
// offset in each of them.
__device__ __forceinline__ void tma_load_4d_multicast(std::uint32_t dst, const void* map,
                                                      std::uint32_t bar, int c0, int c1, int c2,
                                                      int c3, std::uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar),
      "h"(mask)
      : "memory");
}
// Arrives on the barrier at `bar`'s offset in CTA `rank` of the cluster. The
// default (.release.cta) semantics: what the arrival publishes is that this
// CTA's wgmma finished reading a stage, which their wait already ensured.
// .release.cluster would put a MEMBAR.ALL.GPU before every arrival, in the
// consumers' loop (docs/attention.md, *K/V multicast on prompts*).
__device__ __forceinline__ void mbarrier_arrive_cluster(std::uint32_t bar, std::uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
// Every thread of every CTA in the cluster (and its earlier shared-memory
// writes, barrier inits included) before any goes on.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// This CTA's rank in a cluster of 2 over a 1D grid (clusters are CTAs 2c and
// 2c + 1). Read from blockIdx, which ptxas rematerializes where %cluster_ctarank
// would keep a register live (and spill) across the tile.
__device__ __forceinline__ std::uint32_t pair_rank() { return blockIdx.x & 1u; }
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}
#ifdef VPOD_ATTENTION_HAVE_WGMMA
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
#endif

// Position in a ring of kStages stages: the stage and the parity of its
// barriers' current phase.
template <int kStages>
struct RingState {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace ws

// kCluster 2: K/V multicast. The two CTAs of a cluster run the two query
// heads 2k and 2k + 1 of the same item (one KV head: the same keys, blocks and
// masks), each producer loads half of every whole K/V block (64 of its 128
// keys) by TMA into both CTAs' shared memory, and a stage is free once the
// consumers of both CTAs released it. That halves the K/V bytes read from L2
// (what they cost at the power cap, and where the pair's coupling costs more:
// docs/attention.md, *K/V multicast*). The launcher picks it for walks of one
// query head per tile with an even group.
template <typename T, int kHeadDim, int kCluster = 1>
struct PrefillWsTile {
  static constexpr int kBlockM = kPrefillBlockM;  // 128: one m64 half per consumer
  static constexpr int kBlockN = 128;             // keys per block
  static constexpr int kStages = 2;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static_assert(kCluster == 1 || kCluster == 2, "one CTA, or a pair sharing K/V");
  // Arrivals that free a K/V stage: one per consumer warp of every CTA whose
  // shared memory the stage's loads write.
  static constexpr int kKvReleases = 4 * kConsumers * kCluster;
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kKSteps = kHeadDim / 16;  // k steps of Q K^T
  static constexpr int kPSteps = kBlockN / 16;   // k steps of P V
  static constexpr int kSAcc = kBlockN / 2;      // S floats per thread
  static constexpr int kOAcc = kHeadDim / 2;     // O floats per thread
  static constexpr int kRowChunks = kHeadDim / 8;
  static constexpr int kSmemQ = kBlockM * kHeadDim * 2;
  static constexpr int kSmemKV = kBlockN * kHeadDim * 2;  // one K or V block
  static constexpr int kSmemO = kBlockM * kHeadDim * 2;
  // Barriers: q_full, q_empty, then per stage k_full, k_empty, v_full, v_empty.
  static constexpr int kNumBarriers = 2 + 4 * kStages;
  static constexpr int kSmemBytes =
      kSmemQ + 2 * kStages * kSmemKV + kSmemO + 8 * kNumBarriers + 1024;
  // Registers after setmaxnreg (CUTLASS's split for one producer and two
  // consumer warpgroups). setmaxnreg only moves registers the CTA already
  // has: the launch gives each thread 65536 / kThreads rounded down to 8
  // (168), and a consumer's .inc waits until the producer's .dec freed what
  // it asks for. The split must therefore fit 3 x 168 = 504 per thread slot,
  // not the 512 the register file would suggest: 112 + 2 x 200 hangs every
  // launch (measured on the H200, docs/pod.md).
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (1 + kConsumers) * kLaunchRegs,
                "setmaxnreg can only redistribute the launch's registers");
  using E = ElementTraits<T>;
  using Staging = SwizzledTile<kHeadDim>;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim 64 or 128");
  static_assert(kSmemBytes <= 227 * 1024, "fits one SM");

  // Shared-memory map, from the 1024-aligned base.
  struct Smem {
    std::uint32_t q, k, v, o, bars;
    __device__ __forceinline__ explicit Smem(std::uint32_t base)
        : q(base),
          k(base + kSmemQ),
          v(base + kSmemQ + kStages * kSmemKV),
          o(base + kSmemQ + 2 * kStages * kSmemKV),
          bars(base + kSmemQ + 2 * kStages * kSmemKV + kSmemO) {}
    __device__ __forceinline__ std::uint32_t q_full() const { return bars; }
    __device__ __forceinline__ std::uint32_t q_empty() const { return bars + 8; }
    __device__ __forceinline__ std::uint32_t k_full(int s) const { return bars + 16 + 32 * s; }
    __device__ __forceinline__ std::uint32_t k_empty(int s) const { return bars + 24 + 32 * s; }
    __device__ __forceinline__ std::uint32_t v_full(int s) const { return bars + 32 + 32 * s; }
    __device__ __forceinline__ std::uint32_t v_empty(int s) const { return bars + 40 + 32 * s; }
  };

  // The tile of persistent step t: (work item, query head). Item-major: the
  // items longest first, the query heads sharing a KV head side by side (their
  // K/V hit in L2). Head-major (AttentionParams::ws_head_major, when the items
  // cost alike): every item of a head, then the next head, so fewer KV heads'
  // K/V are in flight at once.
  struct Tile {
    PrefillWorkItem item;
    SequenceDesc seq;
    int q_head;      // packed: the KV head's first
    int num_blocks;  // key blocks of 128 from kv_begin, the last possibly partial
    int pack;        // query heads per tile row group: 1, or group_size when packed
  };
  // This CTA's tile in round r of the persistent walk: rounds of gridDim.x
  // tiles over the longest-first list, every other round in reverse CTA
  // order (a plain stride would hand CTA 0 the longest tile of every round).
  // With kCluster 2 the walk is over clusters and tile pairs (tile_at).
  static __device__ __forceinline__ int walkers() { return static_cast<int>(gridDim.x) / kCluster; }
  static __device__ __forceinline__ int tile_of_round(int round) {
    const int g = walkers();
    const int c = static_cast<int>(blockIdx.x) / kCluster;
    return round * g + ((round & 1) != 0 ? g - 1 - c : c);
  }
  // Units of the walk: tiles, or (kCluster 2) pairs of tiles.
  static __device__ __forceinline__ int walk_units(const AttentionParams& p) {
    return p.ws_num_tiles / kCluster;
  }
  static __device__ __forceinline__ Tile tile_at(const AttentionParams& p, int t) {
    Tile tile;
    int item, head;
    if constexpr (kCluster == 2) {
      // Pair t: query heads 2k + rank of one item (never packed or mixed),
      // always item-major: on alike chunks, where one CTA per tile walks
      // head-major, the pairs measured faster item-major and slower
      // head-major (docs/attention.md, *K/V multicast*).
      const int pairs = p.num_q_heads / 2;
      item = t / pairs;
      const int pair = t % pairs;
      head = 2 * pair + static_cast<int>(ws::pair_rank());
      tile.item = p.plan.prefill_items[item];
      tile.pack = 1;
    } else if (p.ws_mixed != 0) {
      // Packing per item: the item whose tiles [ws_tile, next ws_tile) hold t
      // (binary search; the list is in L1 after the first tiles).
      int lo = 0, hi = p.num_prefill_items - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (__ldg(&p.plan.prefill_items[mid].ws_tile) <= t) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      item = lo;
      tile.item = p.plan.prefill_items[item];
      tile.pack = tile.item.pack;
      head = t - tile.item.ws_tile;
    } else {
      const int heads = p.ws_pack > 1 ? p.num_kv_heads : p.num_q_heads;
      item = p.ws_head_major != 0 ? t % p.num_prefill_items : t / heads;
      head = p.ws_head_major != 0 ? t / p.num_prefill_items : t % heads;
      tile.item = p.plan.prefill_items[item];
      tile.pack = p.ws_pack;
    }
    tile.q_head = head * tile.pack;
    tile.seq = p.plan.prefill_seqs[tile.item.seq];
    tile.num_blocks = (tile.item.kv_end - tile.item.kv_begin + kBlockN - 1) / kBlockN;
    return tile;
  }

  // ----------------------------------------------------------------------------------------
  // Producer (one warp).
  // ----------------------------------------------------------------------------------------
  // Loads keys [key0, key0 + 128) of K or V into `dst` with cp.async, rows at
  // or past kv_end zero-filled, then completes `full` once they landed.
  static __device__ __forceinline__ void load_partial(std::uint32_t dst, const T* base,
                                                      const KvAddressing& kv, int slot, int kv_head,
                                                      int key0, int kv_end, std::uint32_t full,
                                                      int lane) {
    // 32 lanes, kRowChunks 16-byte chunks per row: rows lane / kRowChunks + i * kPass.
    constexpr int kPass = 32 / kRowChunks;
    const int chunk = lane % kRowChunks;
    const int row0 = lane / kRowChunks;
    const T* src = base + static_cast<std::int64_t>(slot) * kv.outer_stride +
                   static_cast<std::int64_t>(kv_head) * kv.head_stride + chunk * 8;
#pragma unroll 4
    for (int row = row0; row < kBlockN; row += kPass) {
      const bool valid = key0 + row < kv_end;
      const std::uint32_t off = static_cast<std::uint32_t>((chunk / 8) * kBlockN * 128 + row * 128 +
                                                           (((chunk % 8) ^ (row % 8)) * 16));
      cp_async_16(dst + off,
                  valid ? src + static_cast<std::int64_t>(key0 + row) * kv.token_stride : base,
                  valid);
    }
    cp_async_commit();
    cp_async_wait<0>();
    wgmma::fence_proxy_async();  // the generic-proxy writes, before wgmma reads them
    __syncwarp();
    if (lane == 0) ws::mbarrier_arrive(full);
  }

  // Loads key block [key0, key0 + 128) (whole) of K or V with four (head dim
  // 128) or two TMA boxes of 64 tokens x 64 dims.
  static __device__ __forceinline__ void load_block_tma(std::uint32_t dst, const void* map,
                                                        std::uint32_t full, int slot, int kv_head,
                                                        int key0) {
    // kCluster 2: the whole block lands here, this CTA's half and the peer's.
    wgmma::mbarrier_expect_tx(full, kSmemKV);
    if constexpr (kCluster == 2) {
      const int half = static_cast<int>(ws::pair_rank());
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb) {
        ws::tma_load_4d_multicast(dst + cb * kBlockN * 128 + half * 64 * 128, map, full, cb * 64,
                                  kv_head, key0 + half * 64, slot, 0x3);
      }
    } else {
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          wgmma::tma_load_4d(dst + cb * kBlockN * 128 + half * 64 * 128, map, full, cb * 64,
                             kv_head, key0 + half * 64, slot);
        }
      }
    }
  }

  static __device__ void produce(const AttentionParams& p, const Smem& sm, int lane) {
    const T* k_base = static_cast<const T*>(p.kv.k);
    const T* v_base = static_cast<const T*>(p.kv.v);
    if (lane == 0) {
      ws::prefetch_tensor_map(&p.q_tma);
      ws::prefetch_tensor_map(&p.kv_tma.k);
      ws::prefetch_tensor_map(&p.kv_tma.v);
    }
    const int num_tiles = walk_units(p);
    std::uint32_t q_phase = 0;
    ws::RingState<kStages> ring;
    for (int round = 0; round * walkers() < num_tiles; ++round) {
      const int t = tile_of_round(round);
      if (t >= num_tiles) continue;
      const Tile tile = tile_at(p, t);
      // The planner never cuts an empty item; producer and consumers skip one
      // alike (no load, no wait) rather than wait forever.
      if (tile.num_blocks <= 0) continue;
      const int kv_head = tile.q_head / p.group_size;
      const int slot = tile.seq.slot;
      // Q: free once both consumers finished the last tile's Q K^T.
      wgmma::mbarrier_wait(sm.q_empty(), q_phase ^ 1u);
      if (lane == 0) {
        // A packed Q box holds kBlockM / pack tokens of pack heads (one-head
        // tiles and packed ones share q_tma unless the walk mixes them).
        const void* q_map = p.ws_mixed != 0 && tile.pack > 1 ? &p.q_tma_packed : &p.q_tma;
        wgmma::mbarrier_expect_tx(sm.q_full(),
                                  kColBlocks * (kBlockM / tile.pack) * tile.pack * 128);
#pragma unroll
        for (int cb = 0; cb < kColBlocks; ++cb) {
          ws::tma_load_3d(sm.q + cb * kBlockM * 128, q_map, sm.q_full(), cb * 64, tile.q_head,
                          tile.seq.token_offset + tile.item.q_begin);
        }
      }
      q_phase ^= 1u;
      for (int b = tile.num_blocks - 1; b >= 0; --b) {
        const int key0 = tile.item.kv_begin + b * kBlockN;
        const bool partial = key0 + kBlockN > tile.item.kv_end;
        const std::uint32_t k_dst = sm.k + ring.stage * kSmemKV;
        const std::uint32_t v_dst = sm.v + ring.stage * kSmemKV;
        wgmma::mbarrier_wait(sm.k_empty(ring.stage), ring.phase ^ 1u);
        if (partial) {
          load_partial(k_dst, k_base, p.kv, slot, kv_head, key0, tile.item.kv_end,
                       sm.k_full(ring.stage), lane);
        } else if (lane == 0) {
          load_block_tma(k_dst, &p.kv_tma.k, sm.k_full(ring.stage), slot, kv_head, key0);
        }
        wgmma::mbarrier_wait(sm.v_empty(ring.stage), ring.phase ^ 1u);
        if (partial) {
          load_partial(v_dst, v_base, p.kv, slot, kv_head, key0, tile.item.kv_end,
                       sm.v_full(ring.stage), lane);
        } else if (lane == 0) {
          load_block_tma(v_dst, &p.kv_tma.v, sm.v_full(ring.stage), slot, kv_head, key0);
        }
        ring.advance();
      }
    }
    if constexpr (kCluster == 2) {
      // Neither CTA exits while the peer may still arrive on its barriers:
      // wait until the consumers of both CTAs released every stage (the wait
      // a next fill would make). The peer's multicast bytes have all landed
      // by then, since this CTA's consumers waited for them.
      for (int s = 0; s < kStages; ++s) {
        wgmma::mbarrier_wait(sm.k_empty(ring.stage), ring.phase ^ 1u);
        wgmma::mbarrier_wait(sm.v_empty(ring.stage), ring.phase ^ 1u);
        ring.advance();
      }
    }
  }

  // ----------------------------------------------------------------------------------------
  // Consumers.
  // ----------------------------------------------------------------------------------------
  // Sets S to -inf at keys >= kv_end and above the causal diagonal. `pos`:
  // absolute positions of this thread's two rows (tile rows r and r + 8).
  static __device__ __forceinline__ void mask_block(float (&s)[kSAcc], int key0, int kv_end,
                                                    const int (&pos)[2], int lane) {
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + j * 8 + (lane % 4) * 2 + (e & 1);
        if (key >= kv_end || key > pos[e / 2]) s[4 * j + e] = -INFINITY;
      }
    }
  }

  // Folds S (raw scores) into the running max and sum of this thread's two
  // rows; S becomes exp2(S * scale - max); `correction` rescales O. The max
  // moves only when the block's beats it by more than `slack` (log2 units), so
  // most blocks leave O unscaled (a correction of exactly 1); the exponents
  // stay below 2^slack, and the final O / sum is the same quotient.
  static __device__ __forceinline__ void online_softmax(float (&s)[kSAcc], float (&row_max)[2],
                                                        float (&row_sum)[2], float (&correction)[2],
                                                        float scale_log2, float slack) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float block_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        block_max = fmaxf(block_max, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      }
      block_max = quad_max(block_max) * scale_log2;
      const float new_max = block_max > row_max[h] + slack ? block_max : row_max[h];
      // A row with every key so far masked keeps max -inf: exponents of 0
      // (not NaN) until a key arrives.
      const float base = new_max == -INFINITY ? 0.f : new_max;
      correction[h] = exp2_approx(row_max[h] - base);
      row_max[h] = new_max;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -base));
          s[4 * j + 2 * h + e] = pr;
          sum += pr;
        }
      }
      row_sum[h] = row_sum[h] * correction[h] + sum;
    }
  }

  static __device__ __forceinline__ void rescale(float (&o)[kOAcc], const float (&correction)[2]) {
    // Skipped when no row of the warp raised its max (a correction of exactly 1).
    if (__any_sync(0xffffffffu, correction[0] != 1.f || correction[1] != 1.f)) {
#pragma unroll
      for (int d = 0; d < kHeadDim / 8; ++d) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          o[4 * d + 2 * h] *= correction[h];
          o[4 * d + 2 * h + 1] *= correction[h];
        }
      }
    }
  }

  static __device__ __forceinline__ void to_pa(const float (&s)[kSAcc],
                                               std::uint32_t (&pa)[kPSteps][4]) {
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      pa[kk][0] = E::pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = E::pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = E::pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = E::pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }

#ifdef VPOD_ATTENTION_HAVE_WGMMA
  // Issues S = Q_w K^T (the caller fences and commits).
  static __device__ __forceinline__ void issue_qk(float (&s)[kSAcc], std::uint64_t desc_q,
                                                  std::uint64_t desc_k) {
    using Ops = wgmma::WgmmaOps<T>;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const std::uint32_t a_off = (ks / 4) * kBlockM * 128 + (ks % 4) * 32;
      const std::uint32_t b_off = (ks / 4) * kBlockN * 128 + (ks % 4) * 32;
      if (ks == 0) {
        Ops::ss_n128_first(s, desc_q + (a_off >> 4), desc_k + (b_off >> 4));
      } else {
        Ops::ss_n128(s, desc_q + (a_off >> 4), desc_k + (b_off >> 4));
      }
    }
  }
  // Issues O += P V.
  static __device__ __forceinline__ void issue_pv(float (&o)[kOAcc],
                                                  const std::uint32_t (&pa)[kPSteps][4],
                                                  std::uint64_t desc_v) {
    using Ops = wgmma::WgmmaOps<T>;
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      const std::uint64_t b = desc_v + ((kk * 16 * 128) >> 4);
      if constexpr (kHeadDim == 128) {
        Ops::rs_n128(o, pa[kk], b, 1);
      } else {
        Ops::rs_n64(o, pa[kk], b, 1);
      }
    }
  }
#endif

  // Ends the softmax's basic block: a branch never taken (kv_end >= 0; it
  // would write the row sums into the output staging tile, rewritten before
  // the epilogue reads it) whose store reads the softmax's row sums. Without
  // it ptxas placed the wait for P V (WARPGROUP.DEPBAR.LE gsb0, 0x0) above the
  // softmax in the SASS, so the softmax ran after the P V instead of beside
  // it (docs/attention.md, "The softmax beside P V").
  static __device__ __forceinline__ void softmax_done(const float (&row_sum)[2], std::uint32_t dst,
                                                      int kv_end) {
    if (kv_end < 0) {
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(dst), "f"(row_sum[0]), "f"(row_sum[1])
                   : "memory");
    }
  }

  // One lane per warp arrives on an empty barrier (8 arrivals complete it).
  static __device__ __forceinline__ void release(std::uint32_t bar, int lane) {
    if (lane == 0) ws::mbarrier_arrive(bar);
  }
  // A K/V stage: kCluster 2 also frees it in the peer, whose producer writes
  // this CTA's copy too (kKvReleases arrivals complete it).
  static __device__ __forceinline__ void release_kv(std::uint32_t bar, int lane) {
    if (lane == 0) {
      ws::mbarrier_arrive(bar);
      if constexpr (kCluster == 2) ws::mbarrier_arrive_cluster(bar, ws::pair_rank() ^ 1u);
    }
  }

  static __device__ void consume(const AttentionParams& p, const Smem& sm, char* smem, int wg,
                                 int tid_wg) {
#ifdef VPOD_ATTENTION_HAVE_WGMMA
    const int warp = tid_wg / 32;  // within the warpgroup
    const int lane = tid_wg % 32;
    const int other = 1 - wg;
    const int num_tiles = walk_units(p);
    // K-major Q and K: LBO unused, SBO = 8 rows of 128 bytes. V: MN-major, the
    // next 64 dims a column block (kBlockN rows) further, the next 8 keys 1024 B.
    const std::uint64_t desc_q = wgmma::make_desc(sm.q + wg * 64 * 128, 16, 1024);
    std::uint32_t q_phase = 0;
    ws::RingState<kStages> ring;
    // Consumer 0 issues first.
    if (wg == 1) ws::named_arrive(ws::kTurnBarrier0, kConsumerThreads);
    for (int round = 0; round * walkers() < num_tiles; ++round) {
      const int t = tile_of_round(round);
      if (t >= num_tiles) continue;
      const Tile tile = tile_at(p, t);
      // The planner never cuts an empty item; producer and consumers skip one
      // alike (no load, no wait) rather than wait forever.
      if (tile.num_blocks <= 0) continue;
      const int kv_end = tile.item.kv_end;
      // Tile row r is token r / pack of the item (head r % pack when packed).
      const int row_base = wg * 64 + warp * 16;  // first tile row of this warp
      const int pos_item = tile.seq.cached_len + tile.item.q_begin;
      const int pos_warp = pos_item + row_base / tile.pack;  // the warp's first row's
      const int pos_rows[2] = {pos_item + (row_base + lane / 4) / tile.pack,
                               pos_item + (row_base + lane / 4 + 8) / tile.pack};
      float o[kOAcc];
#pragma unroll
      for (int i = 0; i < kOAcc; ++i) o[i] = 0.f;
      float row_max[2] = {-INFINITY, -INFINITY};
      float row_sum[2] = {0.f, 0.f};
      float correction[2];
      float s[kSAcc];
      std::uint32_t pa[kPSteps][4];

      wgmma::mbarrier_wait(sm.q_full(), q_phase);
      q_phase ^= 1u;

      // The first (last in key order) block: S, softmax, P.
      int b = tile.num_blocks - 1;
      int key0 = tile.item.kv_begin + b * kBlockN;
      wgmma::mbarrier_wait(sm.k_full(ring.stage), ring.phase);
      ws::named_sync(ws::kTurnBarrier0 + wg, kConsumerThreads);
      wgmma::fence();
      issue_qk(s, desc_q, wgmma::make_desc(sm.k + ring.stage * kSmemKV, 16, 1024));
      wgmma::commit();
      ws::named_arrive(ws::kTurnBarrier0 + other, kConsumerThreads);
      wgmma::wait<0>();
      wgmma::fence_operands(s);
      release_kv(sm.k_empty(ring.stage), lane);
      if (b == 0) release(sm.q_empty(), lane);
      mask_block(s, key0, kv_end, pos_rows, lane);
      online_softmax(s, row_max, row_sum, correction, p.scale_log2, p.max_slack);
      to_pa(s, pa);
      ws::RingState<kStages> v_ring = ring;  // the stage of the V that P multiplies
      ring.advance();

      for (--b; b >= 0; --b) {
        key0 = tile.item.kv_begin + b * kBlockN;
        wgmma::mbarrier_wait(sm.k_full(ring.stage), ring.phase);
        wgmma::mbarrier_wait(sm.v_full(v_ring.stage), v_ring.phase);
        ws::named_sync(ws::kTurnBarrier0 + wg, kConsumerThreads);
        wgmma::fence();
        issue_qk(s, desc_q, wgmma::make_desc(sm.k + ring.stage * kSmemKV, 16, 1024));
        wgmma::commit();
        // O takes the last softmax's correction while S runs (FA3's order:
        // off the path from P V completing to the next issue).
        rescale(o, correction);
        wgmma::fence_operands(o);
        wgmma::fence();
        issue_pv(o, pa, wgmma::make_desc(sm.v + v_ring.stage * kSmemKV, kBlockN * 128, 1024));
        wgmma::commit();
        ws::named_arrive(ws::kTurnBarrier0 + other, kConsumerThreads);
        wgmma::wait<1>();  // S done; P V may still run
        wgmma::fence_operands(s);
        release_kv(sm.k_empty(ring.stage), lane);
        if (b == 0) release(sm.q_empty(), lane);
        // Masks only where the block crosses the diagonal or the split's end.
        if (key0 + kBlockN > kv_end || key0 + kBlockN - 1 > pos_warp) {
          mask_block(s, key0, kv_end, pos_rows, lane);
        }
        online_softmax(s, row_max, row_sum, correction, p.scale_log2, p.max_slack);
        softmax_done(row_sum, sm.o, kv_end);
        wgmma::wait<0>();  // P V done: O and the V stage are free
        wgmma::fence_operands(o);
        release_kv(sm.v_empty(v_ring.stage), lane);
        to_pa(s, pa);
        v_ring = ring;
        ring.advance();
      }
      // The last P V.
      wgmma::mbarrier_wait(sm.v_full(v_ring.stage), v_ring.phase);
      rescale(o, correction);
      ws::named_sync(ws::kTurnBarrier0 + wg, kConsumerThreads);
      wgmma::fence_operands(o);
      wgmma::fence();
      issue_pv(o, pa, wgmma::make_desc(sm.v + v_ring.stage * kSmemKV, kBlockN * 128, 1024));
      wgmma::commit();
      ws::named_arrive(ws::kTurnBarrier0 + other, kConsumerThreads);
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      release_kv(sm.v_empty(v_ring.stage), lane);

      write_output(p, tile, o, row_max, row_sum, sm, smem, wg, warp, lane, tid_wg);
    }
#else
    (void)p, (void)sm, (void)smem, (void)wg, (void)tid_wg;
#endif
  }

  static __device__ __forceinline__ void write_output(const AttentionParams& p, const Tile& tile,
                                                      const float (&o)[kOAcc],
                                                      const float (&row_max)[2],
                                                      float (&row_sum)[2], const Smem& sm,
                                                      char* smem, int wg, int warp, int lane,
                                                      int tid_wg) {
    const int pack = tile.pack;  // row r: token r / pack, query head q_head + r % pack
    const int num_rows = min(kBlockM / pack, tile.seq.num_new - tile.item.q_begin) * pack;
#pragma unroll
    for (int h = 0; h < 2; ++h) row_sum[h] = quad_sum(row_sum[h]);
    if (tile.item.partial_row < 0) {
      // Normalize, convert, stage the warpgroup's 64 rows (swizzled 16-byte
      // chunks) and write them with coalesced 16-byte stores.
      char* staging = smem + (sm.o - sm.q);
      ws::named_sync(ws::kEpilogueBarrier0 + wg, 128);  // the last tile's stores read it
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float inv = row_sum[h] > 0.f ? 1.f / row_sum[h] : 0.f;
        const int row = wg * 64 + warp * 16 + lane / 4 + 8 * h;
#pragma unroll
        for (int d = 0; d < kHeadDim / 8; ++d) {
          const int col = d * 8 + (lane % 4) * 2;
          *reinterpret_cast<std::uint32_t*>(staging + Staging::offset(row, col / 8) +
                                            (col % 8) * 2) =
              E::pack(o[4 * d + 2 * h] * inv, o[4 * d + 2 * h + 1] * inv);
        }
      }
      ws::named_sync(ws::kEpilogueBarrier0 + wg, 128);
      T* out_tile = static_cast<T*>(p.out) +
                    static_cast<std::int64_t>(tile.seq.token_offset + tile.item.q_begin) *
                        p.out_token_stride +
                    static_cast<std::int64_t>(tile.q_head) * kHeadDim;
      constexpr int kRowsPerPass = 128 / kRowChunks;
      const int chunk = tid_wg % kRowChunks;
#pragma unroll
      for (int pass = 0; pass < 64 / kRowsPerPass; ++pass) {
        const int row = wg * 64 + pass * kRowsPerPass + tid_wg / kRowChunks;
        if (row < num_rows) {
          *reinterpret_cast<uint4*>(out_tile +
                                    static_cast<std::int64_t>(row / pack) * p.out_token_stride +
                                    (row % pack) * kHeadDim + chunk * 8) =
              *reinterpret_cast<const uint4*>(staging + Staging::offset(row, chunk));
        }
      }
    } else {
      // One KV split: fp32 normalized rows and their log2-sum-exp.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wg * 64 + warp * 16 + lane / 4 + 8 * h;
        if (row >= num_rows) continue;
        const float sum = row_sum[h];
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const std::int64_t prow =
            static_cast<std::int64_t>(tile.item.partial_row + row / pack) * p.num_q_heads +
            tile.q_head + row % pack;
        float* dst = p.plan.partial_o + prow * kHeadDim + (lane % 4) * 2;
#pragma unroll
        for (int d = 0; d < kHeadDim / 8; ++d) {
          *reinterpret_cast<float2*>(dst + d * 8) =
              make_float2(o[4 * d + 2 * h] * inv, o[4 * d + 2 * h + 1] * inv);
        }
        if (lane % 4 == 0) {
          p.plan.partial_lse[prow] = sum > 0.f ? row_max[h] + __log2f(sum) : -INFINITY;
        }
      }
    }
  }

  static __device__ void run(const AttentionParams& p, char* smem_raw) {
#ifdef VPOD_ATTENTION_HAVE_WGMMA
    const int tid = static_cast<int>(threadIdx.x);
    const std::uint32_t raw = smem_addr(smem_raw);
    const std::uint32_t base = (raw + 1023u) & ~1023u;
    const Smem sm(base);
    char* smem = smem_raw + (base - raw);
    if (tid == 0) {
      wgmma::mbarrier_init(sm.q_full(), 1);
      wgmma::mbarrier_init(sm.q_empty(), 4 * kConsumers);
      for (int s = 0; s < kStages; ++s) {
        wgmma::mbarrier_init(sm.k_full(s), 1);
        wgmma::mbarrier_init(sm.k_empty(s), kKvReleases);
        wgmma::mbarrier_init(sm.v_full(s), 1);
        wgmma::mbarrier_init(sm.v_empty(s), kKvReleases);
      }
      wgmma::fence_mbarrier_init();
    }
    // kCluster 2: the peer's barriers are initialized before any load or
    // arrival reaches them.
    if constexpr (kCluster == 2) {
      ws::cluster_sync();
    } else {
      __syncthreads();
    }
    const int wg = tid / 128;
    if (wg == 0) {
      ws::setmaxnreg_dec<kProducerRegs>();
      if (tid < 32) produce(p, sm, tid);
    } else {
      ws::setmaxnreg_inc<kConsumerRegs>();
      consume(p, sm, smem, wg - 1, tid % 128);
    }
#else
    (void)p, (void)smem_raw;
    __trap();  // the launcher never selects this kernel without sm_90a code
#endif
  }
};

// Grid: min(tiles, SMs) persistent CTAs of PrefillWsTile::kThreads; kCluster
// 2: clusters of 2 over min(tile pairs, co-resident clusters).
template <typename T, int kHeadDim, int kCluster>
__global__ void __launch_bounds__(PrefillWsTile<T, kHeadDim, kCluster>::kThreads, 1)
    prefill_ws_kernel(const __grid_constant__ AttentionParams params) {
  extern __shared__ __align__(128) char smem[];
  PrefillWsTile<T, kHeadDim, kCluster>::run(params, smem);
}

}  // namespace vpod::attention::device
