#include "model/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "common/dtype.h"

namespace vpod::model {

namespace {

void attend_sequence(const float* q, std::int64_t q_stride, const KvLayerView& kv,
                     const kernels::KvBlockTable& blocks, const BatchSequence& seq, int num_q_heads,
                     float scale, float* out, std::int64_t out_stride) {
  const int d = kv.head_dim;
  const int group = num_q_heads / kv.num_kv_heads;
  const int ctx = seq.context_len();
  VPOD_CHECK(seq.slot >= 0 && seq.slot < kv.num_slots && ctx <= kv.max_ctx);
  // Keys/values of this sequence, as float: [ctx, kv_heads, d].
  std::vector<float> keys(static_cast<std::size_t>(ctx) * kv.num_kv_heads * d);
  std::vector<float> values(keys.size());
  for (int t = 0; t < ctx; ++t) {
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      const std::int64_t base =
          kernels::kv_row_offset(kv, blocks, seq.slot, t) + h * kv.head_stride;
      for (int i = 0; i < d; ++i) {
        const std::size_t dst = (static_cast<std::size_t>(t) * kv.num_kv_heads + h) * d + i;
        keys[dst] = load_as_float(kv.k, kv.dtype, base + i);
        values[dst] = load_as_float(kv.v, kv.dtype, base + i);
      }
    }
  }
  std::vector<float> scores(ctx);
  for (int i = 0; i < seq.num_new; ++i) {
    const int row = seq.token_offset + i;
    const int visible = seq.cached_len + i + 1;
    for (int h = 0; h < num_q_heads; ++h) {
      const int kvh = h / group;
      const float* qh = q + row * q_stride + static_cast<std::int64_t>(h) * d;
      float max_score = -INFINITY;
      for (int t = 0; t < visible; ++t) {
        const float* kt = keys.data() + (static_cast<std::size_t>(t) * kv.num_kv_heads + kvh) * d;
        float s = 0.0f;
        for (int j = 0; j < d; ++j) s += qh[j] * kt[j];
        scores[t] = s * scale;
        max_score = std::max(max_score, scores[t]);
      }
      double denom = 0.0;
      for (int t = 0; t < visible; ++t) {
        scores[t] = std::exp(scores[t] - max_score);
        denom += scores[t];
      }
      float* oh = out + row * out_stride + static_cast<std::int64_t>(h) * d;
      for (int j = 0; j < d; ++j) oh[j] = 0.0f;
      for (int t = 0; t < visible; ++t) {
        const float p = static_cast<float>(scores[t] / denom);
        const float* vt = values.data() + (static_cast<std::size_t>(t) * kv.num_kv_heads + kvh) * d;
        for (int j = 0; j < d; ++j) oh[j] += p * vt[j];
      }
    }
  }
}

}  // namespace

void reference_attention(const float* q, std::int64_t q_stride, const KvLayerView& kv,
                         const kernels::KvBlockTable& blocks, const HybridBatch& batch,
                         int num_q_heads, float scale, float* out, std::int64_t out_stride) {
  VPOD_CHECK(kv.device == Device::cpu && kv.num_kv_heads > 0 && num_q_heads % kv.num_kv_heads == 0);
  for (const auto& s : batch.prefills) {
    attend_sequence(q, q_stride, kv, blocks, s, num_q_heads, scale, out, out_stride);
  }
  for (const auto& s : batch.decodes) {
    attend_sequence(q, q_stride, kv, blocks, s, num_q_heads, scale, out, out_stride);
  }
}

}  // namespace vpod::model
