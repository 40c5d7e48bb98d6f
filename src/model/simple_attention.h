// A simple, exact GPU attention over the KV cache for every dtype (fp32
// included, which the attention folder's fast kernels do not cover): one CTA
// per (token, query head), keys in chunks with an online softmax. It serves
// the fp32 comparisons against transformers and any shape the fast kernels
// reject; it is not the serving path for fp16/bf16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/kv_view.h"
#include "common/tensor_view.h"

namespace vpod::model {

// q, out [T, q_heads, D]; token t attends to cache rows [0, kv_index[t]] of
// slot slots[t] (device arrays); slots[t] < 0 writes zeros.
void simple_attention_gpu(const TensorView& q, const KvLayerView& kv, const std::int32_t* slots,
                          const std::int32_t* kv_index, float scale, const TensorView& out,
                          cudaStream_t stream);

}  // namespace vpod::model
