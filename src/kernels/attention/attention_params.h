// Plain data shared by the host planner/launchers and the device code: work
// items, kernel parameters, tile shapes. No CUDA headers: host code includes
// it too. All structs are trivially copyable; the kernels take
// `AttentionParams` by value as a __grid_constant__ parameter.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vpod::attention {

// ---------------------------------------------------------------------------
// Tile shapes. The planner cuts work in these units, the kernels compute them.
// ---------------------------------------------------------------------------
// Prefill: a CTA of 4 warps owns 128 query rows of one head (32 rows per warp)
// and walks the keys in blocks of 64 (FlashAttention-2's sm80/sm90 shape).
inline constexpr int kPrefillBlockM = 128;
inline constexpr int kPrefillBlockN = 64;
// Decode: a CTA of 4 warps owns the (up to 16) query heads of one KV head for
// one sequence, and walks the keys in blocks of 64 (16 per warp).
inline constexpr int kDecodeRows = 16;
inline constexpr int kDecodeBlockN = 64;
inline constexpr int kAttentionThreads = 128;
// CTAs the kernels fit per SM (registers and shared memory, see docs/attention.md);
// the planner sizes waves with them.
inline constexpr int kPrefillCtasPerSm = 2;
inline constexpr int kDecodeCtasPerSm = 2;
// The heads decode kernel: one warp per (KV head, head chunk), 4 per CTA.
inline constexpr int kDecodeHeadsPerCta = 4;
// The prefill kernels' lazy running max (KernelOptions::lazy_max):
// exponents up to 2^8 = 256 keep P exact to its format's relative precision
// in fp16 and bf16 and O / the row sums far from fp32's range.
inline constexpr float kMaxSlack = 8.f;
// GQA packing: a prefill tile of `rows` query rows can hold a KV head's whole
// group of query heads (PrefillWorkItem::pack; the planners' shared rule).
constexpr bool gqa_tile_packs(int rows, int group) {
  return group > 1 && rows * group <= kPrefillBlockM;
}
// Whether a step's packable prefill tiles run packed in the warp-specialized
// kernel (the planners' shared rule, so that their estimates count the CTAs
// the kernel runs). for_each_tile(f) calls f(rows, key_blocks) for every
// (unsplit) tile. All tiles packable: yes (a uniform packed walk). Some: yes
// (a walk packed per item) only where the tiles do not cost alike (within
// 20%) or packing saves at least an eighth of the one-head work; otherwise
// the uniform one-head walk, head-major, which streams each KV head's keys
// together (docs/attention.md). The eighth is a judgement: the two walks were
// not timed against each other on such a step.
template <typename ForEachTile>
bool gqa_packable_tiles_pack(ForEachTile&& for_each_tile, int num_q_heads, int num_kv_heads) {
  const int group = num_q_heads / num_kv_heads;
  int tiles = 0, packable = 0, min_blocks = 0, max_blocks = 0;
  double work = 0, saved = 0;  // key blocks x query heads, and packing's saving
  for_each_tile([&](int rows, int blocks) {
    min_blocks = tiles == 0 ? blocks : (blocks < min_blocks ? blocks : min_blocks);
    max_blocks = blocks > max_blocks ? blocks : max_blocks;
    ++tiles;
    work += static_cast<double>(blocks) * num_q_heads;
    if (gqa_tile_packs(rows, group)) {
      ++packable;
      saved += static_cast<double>(blocks) * (num_q_heads - num_kv_heads);
    }
  });
  if (packable == 0) return false;
  if (packable == tiles) return true;
  const bool alike = 5 * min_blocks >= 4 * max_blocks;
  return !alike || 8.0 * saved >= work;
}

// ---------------------------------------------------------------------------
// Work lists (built by AttentionPlan, read by the kernels).
// ---------------------------------------------------------------------------
// One sequence of the batch, as the kernels see it (16 bytes).
struct SequenceDesc {
  std::int32_t slot;          // KV-cache slot (paged: block-table row)
  std::int32_t cached_len;    // keys already cached before this step's tokens
  std::int32_t num_new;       // this step's tokens (1 for a decode)
  std::int32_t token_offset;  // row of the first new token in q / out
};

// One prefill CTA per (item, query head): query rows [q_begin, q_begin +
// min(kPrefillBlockM, num_new - q_begin)) of sequence `seq`, keys
// [kv_begin, kv_end). kv_begin is a multiple of kPrefillBlockN; kv_end is
// clipped to the causal bound of the tile's last row.
struct PrefillWorkItem {
  std::int32_t seq;      // index into the prefill sequences
  std::int32_t q_begin;  // first query row of the tile, within the chunk
  std::int32_t kv_begin;
  std::int32_t kv_end;
  std::int32_t partial_row;  // -1: the tile writes `out`; else its first partial row
  std::int32_t split;        // index of this KV split (0 when unsplit)
  std::int32_t num_splits;   // KV splits of this tile
  std::int32_t cost;         // key blocks to process (planner's estimate)
  // GQA packing (the warp-specialized kernel only; the other prefill kernels
  // run every item one query head per tile): `pack` is the group size when
  // the tile has at most kPrefillBlockM / group rows, so one tile can hold a
  // KV head's whole group, and the step's walk packs (gqa_packable_tiles_pack),
  // else 1. `ws_tile`: the item's first tile in that
  // kernel's walk when it packs per item (AttentionParams::ws_mixed), the sum
  // of the tiles of the items before it (num_kv_heads per packed item,
  // num_q_heads per other).
  std::int32_t pack = 1;
  std::int32_t ws_tile = 0;
};

// One decode CTA per (item, KV head, head chunk), or per (item, group of
// kDecodeHeadsPerCta heads) for the heads kernel: keys [kv_begin, kv_end) of
// decode `seq`; kv_begin is a multiple of kDecodeBlockN. The item repeats the
// sequence's slot and token row, so a CTA starts its K/V loads after one
// 32-byte load (two vector loads) instead of two dependent ones.
struct alignas(16) DecodeWorkItem {
  std::int32_t seq;  // index into the decode sequences
  std::int32_t kv_begin;
  std::int32_t kv_end;
  std::int32_t partial_row;   // -1: writes `out`; else the partial row of this split
  std::int32_t combine;       // -1 when unsplit; else the index of its decode combine item
  std::int32_t slot;          // decode_seqs[seq].slot
  std::int32_t token_offset;  // decode_seqs[seq].token_offset (row of q / out)
  std::int32_t reserved = 0;
};

// One output token whose value is merged from KV splits: split s of row r
// lives at partial row `partial_row + s * partial_stride`.
struct CombineItem {
  std::int32_t token;  // row of q / out
  std::int32_t num_splits;
  std::int32_t partial_row;
  std::int32_t partial_stride;
};

// Where each new token's K/V goes (append).
struct TokenSlot {
  std::int32_t slot;
  std::int32_t position;
};

// Byte offsets of the work lists inside AttentionBuffers::metadata.
struct PlanLayout {
  std::size_t prefill_seqs = 0;
  std::size_t decode_seqs = 0;
  std::size_t prefill_items = 0;
  std::size_t decode_items = 0;
  std::size_t prefill_combines = 0;
  std::size_t decode_combines = 0;
  std::size_t token_slots = 0;
  std::size_t total = 0;
};

// Device pointers to the uploaded work lists and the split workspace.
struct PlanPointers {
  const SequenceDesc* prefill_seqs = nullptr;
  const SequenceDesc* decode_seqs = nullptr;
  const PrefillWorkItem* prefill_items = nullptr;
  const DecodeWorkItem* decode_items = nullptr;
  const CombineItem* prefill_combines = nullptr;
  const CombineItem* decode_combines = nullptr;
  const TokenSlot* token_slots = nullptr;
  float* partial_o = nullptr;    // [partial_rows, num_q_heads, head_dim]
  float* partial_lse = nullptr;  // [partial_rows, num_q_heads], log2 domain
  // [decode combines, num_kv_heads, decode_head_chunks] arrival counters of
  // the decode splits (zeroed by AttentionPlan::upload, reset by the decode
  // kernel's last split, which merges the group). Null: a combine kernel merges.
  std::int32_t* decode_counters = nullptr;
};

// ---------------------------------------------------------------------------
// Kernel parameters.
// ---------------------------------------------------------------------------
// How a kernel finds the K/V row of (slot, token, head). Contiguous (vAttention)
// when block_table is null: offset = slot * outer_stride + token * token_stride
// + head * head_stride. Paged: offset = block_table[slot * block_table_stride +
// token >> block_shift] * outer_stride + (token & (block_size-1)) * token_stride
// + head * head_stride. Offsets in elements.
struct KvAddressing {
  void* k = nullptr;
  void* v = nullptr;
  std::int64_t outer_stride = 0;  // slot stride (contiguous) or block stride (paged)
  std::int64_t token_stride = 0;
  std::int64_t head_stride = 0;
  const std::int32_t* block_table = nullptr;
  std::int32_t block_table_stride = 0;
  std::int32_t block_shift = 0;
};

// A TMA descriptor (the driver's CUtensorMap, 128 bytes) as plain bytes, so
// host code including this header needs no CUDA types. The device reads it in
// place from the __grid_constant__ kernel parameter (64-byte aligned there).
struct alignas(64) TensorMapBytes {
  std::uint64_t words[16] = {};
};

// TMA descriptors of one contiguous layer's K and V (kv_tensor_map.h): 4D
// tensors {head_dim, kv head, token, slot} loaded in boxes of 64 dims x 64
// tokens with the 128-byte swizzle the wgmma prefill tile reads. `valid` is 0
// for paged caches, for shapes a descriptor cannot express, and where TMA is
// switched off; the tile then loads K/V with cp.async.
struct KvTensorMaps {
  TensorMapBytes k;
  TensorMapBytes v;
  std::int32_t valid = 0;
};

struct AttentionParams {
  const void* q = nullptr;          // [num_tokens, num_q_heads, head_dim]
  std::int64_t q_token_stride = 0;  // elements
  void* out = nullptr;              // [num_tokens, num_q_heads, head_dim]
  std::int64_t out_token_stride = 0;
  KvAddressing kv;
  KvTensorMaps kv_tma;  // contiguous K/V for the sm_90a prefill tile's TMA loads
  // Q as a 3D tensor {head_dim, q head, token} in boxes of 64 dims x ws_pack
  // heads x kPrefillBlockM / ws_pack tokens (the warp-specialized prefill
  // kernel, prefill_ws.cuh); valid only when that kernel runs.
  TensorMapBytes q_tma;
  std::int32_t q_tma_valid = 0;
  // With ws_mixed: q_tma holds one-head boxes (ws_pack 1) and q_tma_packed
  // boxes of group_size heads, for the packed items.
  TensorMapBytes q_tma_packed;
  // The warp-specialized kernel walks its tiles head-major (every item of a
  // query head, then the next head); 0: item-major (the launcher decides).
  // K/V-multicast pairs walk item-major whatever it says.
  std::int32_t ws_head_major = 0;
  // Query heads per tile of the warp-specialized kernel: 1, one query head
  // per tile; group_size, a KV head's query heads packed into one tile, row r
  // = (token r / ws_pack, head r % ws_pack), for plans whose items all have
  // at most kPrefillBlockM / group_size query rows (AttentionPlan::prefill_pack).
  std::int32_t ws_pack = 1;
  // 1: packing per item instead (PrefillWorkItem::pack and ::ws_tile: a step
  // with short chunks beside long ones); ws_pack and ws_head_major are then
  // unused and the walk has ws_num_tiles tiles.
  std::int32_t ws_mixed = 0;
  std::int32_t ws_num_tiles = 0;
  // The prefill kernels (warp-specialized, wgmma and mma.sync tiles, POD's
  // prefill side) move a row's running max only when a key block's max beats
  // it by more than this (log2 units; 0: on every rise).
  // Exponents stay below 2^max_slack (KernelOptions::lazy_max).
  float max_slack = 0.f;
  std::int32_t num_q_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t group_size = 0;          // num_q_heads / num_kv_heads
  std::int32_t decode_head_chunks = 0;  // ceil(group_size / kDecodeRows)
  float scale_log2 = 0.f;               // softmax_scale * log2(e)
  std::int32_t num_prefill_items = 0;
  std::int32_t num_decode_items = 0;
  PlanPointers plan;
};

struct CombineParams {
  const CombineItem* items = nullptr;
  std::int32_t num_items = 0;
  const float* partial_o = nullptr;    // [partial_rows, num_q_heads, head_dim]
  const float* partial_lse = nullptr;  // [partial_rows, num_q_heads]
  void* out = nullptr;                 // [num_tokens, num_q_heads, head_dim]
  std::int64_t out_token_stride = 0;
  std::int32_t num_q_heads = 0;
  std::int32_t head_dim = 0;
};

struct AppendParams {
  const void* k_new = nullptr;  // [num_tokens, num_kv_heads, head_dim]
  const void* v_new = nullptr;
  std::int64_t k_new_token_stride = 0;
  std::int64_t v_new_token_stride = 0;
  const TokenSlot* token_slots = nullptr;  // [num_tokens]
  std::int32_t num_tokens = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t element_bytes = 0;
  KvAddressing kv;
};

}  // namespace vpod::attention
