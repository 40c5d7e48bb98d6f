// How K and V are addressed: the one view family shared by the KV caches
// (src/kvcache, which hand them out), the model (src/model, which passes them
// through) and the kernels (src/kernels, which read them). Plain structs.
//
// KvLayerView: one layer of a virtually contiguous cache (vAttention). Both
// KV layouts are expressed by strides alone:
//   per-layer  [slots, max_ctx, kv_heads, head_dim]: token stride = kv_heads*head_dim
//   all-layers [slots, max_ctx, layers, kv_heads, head_dim] viewed at one
//              layer: token stride = layers*kv_heads*head_dim
// PagedKvView: one layer of the paged baseline (`--kv-cache paged`): block
// pools and a block table.
// KvCacheView: every layer of one cache, as a store hands it to the model.
#pragma once

#include <cstdint>
#include <span>

#include "common/dtype.h"
#include "common/tensor_view.h"

namespace vpod {

struct KvLayerView {
  void* k = nullptr;  // element (slot, token, head, d) at k + slot*slot_stride
  void* v = nullptr;  //   + token*token_stride + head*head_stride + d
  DType dtype = DType::f16;
  Device device = Device::cpu;
  int num_slots = 0;
  int max_ctx = 0;  // tokens addressable per slot (virtual; mapped on demand)
  int num_kv_heads = 0;
  int head_dim = 0;
  // Strides in elements. head_dim is always contiguous (stride 1).
  std::int64_t slot_stride = 0;
  std::int64_t token_stride = 0;
  std::int64_t head_stride = 0;
};

// Token t of slot s, head h, element d lives at
//   k + block_table[s * max_blocks_per_slot + t / block_size] * block_stride
//     + (t % block_size) * token_stride + h * head_stride + d
// (strides in elements; k and v share them). The table row of a sequence is
// its BatchSequence::slot.
struct PagedKvView {
  void* k = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  void* v = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  DType dtype = DType::f16;
  Device device = Device::cpu;  // where k, v and block_table live
  int num_blocks = 0;
  int block_size = 0;  // tokens per block: a power of two (16 and 256 in the papers' runs)
  int num_kv_heads = 0;
  int head_dim = 0;
  std::int64_t block_stride = 0;  // block_size * num_kv_heads * head_dim
  std::int64_t token_stride = 0;  // num_kv_heads * head_dim
  std::int64_t head_stride = 0;   // head_dim
  // [num_slots, max_blocks_per_slot] block indices; entries past a slot's
  // allocated blocks are 0 (a valid block), so an over-reading kernel stays
  // in bounds.
  const std::int32_t* block_table = nullptr;
  int num_slots = 0;
  int max_blocks_per_slot = 0;
};

// Every layer of one KV cache: exactly one of the spans is non-empty, one
// entry per layer. The store that hands it out owns the entries (they stay
// valid, unchanged, for the store's life).
struct KvCacheView {
  std::span<const KvLayerView> contiguous;
  std::span<const PagedKvView> paged;

  bool is_paged() const { return !paged.empty(); }
  int num_layers() const { return static_cast<int>(is_paged() ? paged.size() : contiguous.size()); }
};

}  // namespace vpod
