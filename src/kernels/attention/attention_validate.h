// Input checks shared by the attention launchers (and tested on the CPU).
// Each returns a Status naming the argument and the mismatch.
#pragma once

#include "common/status.h"
#include "kernels/attention/attention.h"

namespace vpod::attention {

// q or out: [>= num_tokens, heads, head_dim] on cuda, plan dtype, head_dim
// contiguous, 16-byte aligned rows.
Status validate_token_view(const char* name, const TensorView& view, const AttentionPlan& plan,
                           int heads);
Status validate_kv_view(const KvLayerView& kv, const AttentionPlan& plan);
Status validate_paged_kv_view(const PagedKvView& kv, const AttentionPlan& plan);
Status validate_buffers(const AttentionBuffers& buffers, const AttentionPlan& plan);
Status validate_softmax_scale(float softmax_scale);

}  // namespace vpod::attention
