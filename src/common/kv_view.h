// How attention kernels see one layer's K and V: plain strided tensors over a
// virtually contiguous cache (vAttention). Both KV layouts are expressed by
// strides alone:
//   per-layer  [slots, max_ctx, kv_heads, head_dim]: token stride = kv_heads*head_dim
//   all-layers [slots, max_ctx, layers, kv_heads, head_dim] viewed at one
//              layer: token stride = layers*kv_heads*head_dim
// The KV cache (src/kvcache) produces these; kernels (src/kernels) consume them.
#pragma once

#include <cstdint>

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

}  // namespace vpod
