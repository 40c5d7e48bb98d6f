// Rotary position embeddings (rotate-half convention of Hugging Face's
// Llama/Qwen code: dimension i pairs with i + head_dim/2) and the append of
// the step's K/V into the cache, fused on the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/kv_view.h"
#include "common/tensor_view.h"
#include "kernels/launch_options.h"

namespace vpod::kernels {

enum class RopeScalingType : std::uint8_t { none, linear, llama3 };

struct RopeParams {
  double theta = 10000.0;
  RopeScalingType scaling = RopeScalingType::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;                 // llama3
  double high_freq_factor = 4.0;                // llama3
  int original_max_position_embeddings = 8192;  // llama3
};

// inv_freq[i] = theta^(-2i / head_dim), i < head_dim/2, then scaled:
//   linear: inv_freq / factor
//   llama3: wavelengths above original/low_freq_factor are divided by factor,
//           below original/high_freq_factor kept, smoothly interpolated between
// (transformers' _compute_llama3_parameters). Angles are pos * inv_freq in fp32.
std::vector<float> rope_inv_freq(const RopeParams& params, int head_dim);

// ---- CPU references ----
// x [rows, heads, head_dim] at row stride `row_stride` rotated in place.
void rope_ref(float* x, std::int64_t row_stride, int rows, int heads, int head_dim,
              const std::int32_t* positions, const float* inv_freq);
// Writes k, v [rows, kv_heads, head_dim] (row strides) into the cache at
// (slots[t], kv_index[t]), rows with slots[t] < 0 skipped; the cache may be
// any dtype on the CPU. Contiguous (vAttention) or paged (block table on the
// host; the slot is the table row).
void kv_append_ref(const float* k, std::int64_t k_stride, const float* v, std::int64_t v_stride,
                   int rows, const std::int32_t* slots, const std::int32_t* kv_index,
                   const KvLayerView& kv);
void kv_append_ref(const float* k, std::int64_t k_stride, const float* v, std::int64_t v_stride,
                   int rows, const std::int32_t* slots, const std::int32_t* kv_index,
                   const PagedKvView& kv);

// ---- GPU launcher ----
// q [T, q_heads, D], k/v [T, kv_heads, D] (row strides free; same dtype as
// the cache): rotates q and k in place, then appends k and v to the cache,
// contiguous (KvLayerView) or paged (PagedKvView: device block table, a
// power-of-two block size). positions, slots, kv_index, inv_freq are device
// arrays. Both overloads launch the same kernel; only the row addressing of
// the cache differs.
struct RopeKvAppendArgs {
  TensorView q, k, v;
  const std::int32_t* positions = nullptr;  // [T]
  const std::int32_t* slots = nullptr;      // [T]; -1 skips the token (padding)
  const std::int32_t* kv_index = nullptr;   // [T]
  const float* inv_freq = nullptr;          // [D/2]
  LaunchOptions launch;
};
void rope_kv_append_gpu(const RopeKvAppendArgs& args, const KvLayerView& kv, cudaStream_t stream);
void rope_kv_append_gpu(const RopeKvAppendArgs& args, const PagedKvView& kv, cudaStream_t stream);

}  // namespace vpod::kernels
