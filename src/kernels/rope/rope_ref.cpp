// CPU references of RoPE (inverse frequencies, rotation) and of the KV append.
#include <cmath>

#include "common/check.h"
#include "common/dtype.h"
#include "kernels/rope/rope.h"

namespace vpod::kernels {

std::vector<float> rope_inv_freq(const RopeParams& p, int head_dim) {
  VPOD_CHECK(head_dim > 0 && head_dim % 2 == 0);
  std::vector<float> inv(head_dim / 2);
  constexpr double kPi = 3.141592653589793238462643383279502884;
  for (int i = 0; i < head_dim / 2; ++i) {
    // fp32 like transformers: theta ** (arange(0, dim, 2).float() / dim)
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    float f = static_cast<float>(1.0 / std::pow(p.theta, static_cast<double>(exponent)));
    switch (p.scaling) {
      case RopeScalingType::none: break;
      case RopeScalingType::linear: f = static_cast<float>(f / p.factor); break;
      case RopeScalingType::llama3: {
        const double old_len = p.original_max_position_embeddings;
        const double low_wavelen = old_len / p.low_freq_factor;
        const double high_wavelen = old_len / p.high_freq_factor;
        const double wavelen = 2.0 * kPi / f;
        if (wavelen > low_wavelen) {
          f = static_cast<float>(f / p.factor);
        } else if (wavelen >= high_wavelen) {  // medium: interpolate
          const double smooth =
              (old_len / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
          f = static_cast<float>((1.0 - smooth) * f / p.factor + smooth * f);
        }
        break;
      }
    }
    inv[i] = f;
  }
  return inv;
}

void rope_ref(float* x, std::int64_t row_stride, int rows, int heads, int head_dim,
              const std::int32_t* positions, const float* inv_freq) {
  const int half = head_dim / 2;
  for (int t = 0; t < rows; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      const float c = std::cos(angle);
      const float s = std::sin(angle);
      for (int h = 0; h < heads; ++h) {
        float* xh = x + t * row_stride + static_cast<std::int64_t>(h) * head_dim;
        const float a = xh[i];
        const float b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = b * c + a * s;
      }
    }
  }
}

namespace {

// Writes the step's k, v rows; `row_offset(slot, token)` is the element
// offset of (slot, token, head 0, d 0) in the cache.
template <typename Kv, typename RowOffset>
void append_rows(const float* k, std::int64_t k_stride, const float* v, std::int64_t v_stride,
                 int rows, const std::int32_t* slots, const std::int32_t* kv_index, const Kv& kv,
                 int num_slots, int max_ctx, RowOffset row_offset) {
  VPOD_CHECK(kv.device == Device::cpu);
  for (int t = 0; t < rows; ++t) {
    if (slots[t] < 0) continue;
    VPOD_CHECK(slots[t] < num_slots && kv_index[t] >= 0 && kv_index[t] < max_ctx);
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      const std::int64_t base = row_offset(slots[t], kv_index[t]) + h * kv.head_stride;
      for (int d = 0; d < kv.head_dim; ++d) {
        const std::int64_t src = static_cast<std::int64_t>(h) * kv.head_dim + d;
        store_from_float(kv.k, kv.dtype, base + d, k[t * k_stride + src]);
        store_from_float(kv.v, kv.dtype, base + d, v[t * v_stride + src]);
      }
    }
  }
}

}  // namespace

void kv_append_ref(const float* k, std::int64_t k_stride, const float* v, std::int64_t v_stride,
                   int rows, const std::int32_t* slots, const std::int32_t* kv_index,
                   const KvLayerView& kv) {
  append_rows(k, k_stride, v, v_stride, rows, slots, kv_index, kv, kv.num_slots, kv.max_ctx,
              [&kv](int slot, int token) {
                return slot * kv.slot_stride + static_cast<std::int64_t>(token) * kv.token_stride;
              });
}

void kv_append_ref(const float* k, std::int64_t k_stride, const float* v, std::int64_t v_stride,
                   int rows, const std::int32_t* slots, const std::int32_t* kv_index,
                   const PagedKvView& kv) {
  VPOD_CHECK(kv.block_table != nullptr && kv.block_size > 0);
  append_rows(k, k_stride, v, v_stride, rows, slots, kv_index, kv, kv.num_slots,
              kv.max_blocks_per_slot * kv.block_size, [&kv](int slot, int token) {
                const std::int64_t block =
                    kv.block_table[static_cast<std::int64_t>(slot) * kv.max_blocks_per_slot +
                                   token / kv.block_size];
                return block * kv.block_stride +
                       static_cast<std::int64_t>(token % kv.block_size) * kv.token_stride;
              });
}

}  // namespace vpod::kernels
