// What a paged-attention kernel needs to read one layer of the paged baseline
// (`--kv-cache paged`, vLLM-style): the block pools and the block tables.
// Token t of slot s, head h, element d lives at
//   k + block_table[s * max_blocks_per_slot + t / block_size] * block_stride
//     + (t % block_size) * token_stride + h * head_stride + d
// (strides in elements; k and v share them). Field names match the attention
// kernels' attention::PagedKvView, so handing one over is a field-wise copy.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "common/tensor_view.h"

namespace vpod::kvcache {

struct PagedKvLayerView {
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

}  // namespace vpod::kvcache
