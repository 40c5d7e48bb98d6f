// CPU references of the attention kernels: what the GPU kernels must compute,
// written plainly. Used by the tests and by `vpod bench attention` to validate
// before timing; with ReferencePrecision::fp32, also the attention of the CPU
// backend (any head_dim and dtype, not only the kernels').
#pragma once

#include <vector>

#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "kernels/attention/attention.h"

namespace vpod::attention {

enum class ReferencePrecision {
  fp64,  // products, softmax and sums in double (the tests' ground truth)
  // The same in float, the softmax denominator summed in double: the CPU
  // backend's attention (src/model/cpu_backend.cpp; its goldens pin the bits).
  fp32,
  // What an unfused implementation in the input precision computes: scores
  // and probabilities rounded to the input dtype between steps (matmuls
  // accumulate in fp32, as cuBLAS does). Tests allow the kernels at most twice
  // this implementation's error against fp64.
  naive,
};

enum class ReferencePart { prefill, decode, all };

// Writes the attention output of the selected rows into `out` (cpu, fp32,
// [num_tokens, num_q_heads, head_dim]). `q` is a cpu view [num_tokens,
// num_q_heads, head_dim] in the model dtype; K/V are read from the cache,
// which must already hold the new tokens (reference_append_kv). `tokens`
// selects rows of the flattened batch (empty: every row of `part`).
Status reference_attention(const HybridBatch& batch, const AttentionDims& dims, const TensorView& q,
                           const KvLayerView& kv, const TensorView& out, float softmax_scale,
                           ReferencePrecision precision, ReferencePart part = ReferencePart::all,
                           const std::vector<int>& tokens = {});
// The same through a block table (kv.block_table on the cpu).
Status reference_attention(const HybridBatch& batch, const AttentionDims& dims, const TensorView& q,
                           const PagedKvView& kv, const TensorView& out, float softmax_scale,
                           ReferencePrecision precision, ReferencePart part = ReferencePart::all,
                           const std::vector<int>& tokens = {});

// Writes each new token's K and V rows ([num_tokens, num_kv_heads, head_dim],
// cpu) into the cache at (slot, cached_len + i).
Status reference_append_kv(const HybridBatch& batch, const AttentionDims& dims,
                           const TensorView& k_new, const TensorView& v_new, const KvLayerView& kv);
Status reference_append_kv(const HybridBatch& batch, const AttentionDims& dims,
                           const TensorView& k_new, const TensorView& v_new, const PagedKvView& kv);

}  // namespace vpod::attention
