// A plain CPU attention over the KV cache (fp32 math, any cache dtype): the
// CPU backend's attention and the reference the model's GPU path is checked
// against. Kept in src/model until the attention folder publishes its own
// CPU reference.
#pragma once

#include <cstdint>

#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "kernels/rope/rope.h"

namespace vpod::model {

// q, out: [num_tokens, q_heads, head_dim] fp32 at the given token strides;
// query i of a sequence attends to cache rows [0, cached_len + i]; `blocks`
// set: the cache is paged (kernels::KvBlockTable, host table).
void reference_attention(const float* q, std::int64_t q_stride, const KvLayerView& kv,
                         const kernels::KvBlockTable& blocks, const HybridBatch& batch,
                         int num_q_heads, float scale, float* out, std::int64_t out_stride);

}  // namespace vpod::model
