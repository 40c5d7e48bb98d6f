// Test helpers for the attention kernels: batches, random fp16/bf16 data, and
// host K/V caches in every layout the kernels read (per-layer, all-layers,
// paged with block size 1, 16, 64 or 256), poisoned with NaN where no token
// lives.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "kernels/attention/attention.h"

namespace vpod::attention::testing {

enum class KvLayout { per_layer, all_layers, paged1, paged16, paged64, paged256 };

inline const char* layout_name(KvLayout layout) {
  switch (layout) {
    case KvLayout::per_layer: return "per_layer";
    case KvLayout::all_layers: return "all_layers";
    case KvLayout::paged1: return "paged1";
    case KvLayout::paged16: return "paged16";
    case KvLayout::paged64: return "paged64";
    case KvLayout::paged256: return "paged256";
  }
  return "?";
}

// Tokens per block of a paged layout (0: contiguous).
inline int page_size_of(KvLayout layout) {
  switch (layout) {
    case KvLayout::paged1: return 1;
    case KvLayout::paged16: return 16;
    case KvLayout::paged64: return 64;
    case KvLayout::paged256: return 256;
    case KvLayout::per_layer:
    case KvLayout::all_layers: break;
  }
  return 0;
}

inline bool is_paged(KvLayout layout) { return page_size_of(layout) > 0; }

// A NaN bit pattern of the dtype: any read of a cache position that holds no
// token turns the output into NaN.
inline std::uint16_t nan_bits(DType dtype) { return dtype == DType::bf16 ? 0x7fc0 : 0x7e00; }

inline std::uint16_t to_bits(DType dtype, float x) {
  return dtype == DType::bf16 ? float_to_bf16_bits(x) : float_to_half_bits(x);
}

inline std::vector<std::uint16_t> random_values(std::size_t n, DType dtype, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::uint16_t> out(n);
  for (auto& x : out) x = to_bits(dtype, normal(rng));
  return out;
}

struct SeqSpec {
  int cached_len;
  int num_new;
};

// Prefill chunks first, then decodes (num_new 1); sequence i of the whole
// list gets slot slots[i] (default: reversed order, so slot != index).
inline HybridBatch make_batch(const std::vector<SeqSpec>& prefills,
                              const std::vector<int>& decode_contexts,
                              std::vector<int> slots = {}) {
  const int n = static_cast<int>(prefills.size() + decode_contexts.size());
  if (slots.empty()) {
    slots.resize(n);
    for (int i = 0; i < n; ++i) slots[i] = n - 1 - i;
  }
  HybridBatch batch;
  int offset = 0;
  int index = 0;
  for (const SeqSpec& p : prefills) {
    batch.prefills.push_back({slots[index++], p.cached_len, p.num_new, offset});
    for (int i = 0; i < p.num_new; ++i) batch.positions.push_back(p.cached_len + i);
    offset += p.num_new;
  }
  for (int ctx : decode_contexts) {
    batch.decodes.push_back({slots[index++], ctx - 1, 1, offset});
    batch.positions.push_back(ctx - 1);
    offset += 1;
  }
  batch.token_ids.assign(offset, 0);
  return batch;
}

// FNV-1a over the plan's work lists (every field is an int32, no padding):
// two plans with the same hash launch the same items in the same order.
inline std::uint64_t work_list_hash(const AttentionPlan& plan) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const auto& list) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(list.data());
    for (std::size_t i = 0; i < list.size() * sizeof(list[0]); ++i) {
      h ^= bytes[i];
      h *= 1099511628211ull;
    }
  };
  mix(plan.prefill_items());
  mix(plan.decode_items());
  mix(plan.prefill_combines());
  mix(plan.decode_combines());
  return h;
}

// A host K/V cache in one layout. Every element starts as NaN.
struct HostKvCache {
  AttentionDims dims;
  KvLayout layout = KvLayout::per_layer;
  int num_slots = 0;
  int max_ctx = 0;
  // all-layers: the view reads layer kLayer of kLayers.
  static constexpr int kLayers = 3;
  static constexpr int kLayer = 1;
  int block_size = 0;
  int max_blocks_per_slot = 0;
  int num_blocks = 0;
  std::vector<std::uint16_t> k, v;
  std::vector<std::int32_t> block_table;  // [num_slots, max_blocks_per_slot]

  HostKvCache(const AttentionDims& d, KvLayout l, int slots, int ctx, std::mt19937_64& rng)
      : dims(d), layout(l), num_slots(slots), max_ctx(ctx) {
    const std::size_t row = static_cast<std::size_t>(dims.num_kv_heads) * dims.head_dim;
    std::size_t elements = 0;
    if (is_paged(layout)) {
      block_size = page_size_of(layout);
      max_blocks_per_slot = (max_ctx + block_size - 1) / block_size;
      num_blocks = num_slots * max_blocks_per_slot + 3;  // a few blocks never used
      std::vector<std::int32_t> perm(num_blocks);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      block_table.assign(perm.begin(), perm.begin() + num_slots * max_blocks_per_slot);
      elements = static_cast<std::size_t>(num_blocks) * block_size * row;
    } else {
      const int layers = layout == KvLayout::all_layers ? kLayers : 1;
      elements = static_cast<std::size_t>(num_slots) * max_ctx * layers * row;
    }
    k.assign(elements, nan_bits(dims.dtype));
    v.assign(elements, nan_bits(dims.dtype));
  }

  std::int64_t token_stride() const {
    const std::int64_t row = static_cast<std::int64_t>(dims.num_kv_heads) * dims.head_dim;
    return layout == KvLayout::all_layers ? kLayers * row : row;
  }

  // Contiguous view over (k, v) (host or device copies of this cache).
  KvLayerView view(void* kp, void* vp, Device device) const {
    const std::int64_t layer_offset =
        layout == KvLayout::all_layers
            ? static_cast<std::int64_t>(kLayer) * dims.num_kv_heads * dims.head_dim
            : 0;
    KvLayerView view;
    view.k = static_cast<std::uint16_t*>(kp) + layer_offset;
    view.v = static_cast<std::uint16_t*>(vp) + layer_offset;
    view.dtype = dims.dtype;
    view.device = device;
    view.num_slots = num_slots;
    view.max_ctx = max_ctx;
    view.num_kv_heads = dims.num_kv_heads;
    view.head_dim = dims.head_dim;
    view.token_stride = token_stride();
    view.slot_stride = token_stride() * max_ctx;
    view.head_stride = dims.head_dim;
    return view;
  }

  PagedKvView paged_view(void* kp, void* vp, const std::int32_t* table, Device device) const {
    PagedKvView view;
    view.k = kp;
    view.v = vp;
    view.dtype = dims.dtype;
    view.device = device;
    view.num_blocks = num_blocks;
    view.block_size = block_size;
    view.num_kv_heads = dims.num_kv_heads;
    view.head_dim = dims.head_dim;
    view.token_stride = token_stride();
    view.block_stride = token_stride() * block_size;
    view.head_stride = dims.head_dim;
    view.block_table = table;
    view.num_slots = num_slots;
    view.max_blocks_per_slot = max_blocks_per_slot;
    return view;
  }

  // Element index of (slot, token, head, 0).
  std::size_t index(int slot, int token, int head) const {
    if (is_paged(layout)) {
      const int block =
          block_table[static_cast<std::size_t>(slot) * max_blocks_per_slot + token / block_size];
      return (static_cast<std::size_t>(block) * block_size + token % block_size) * token_stride() +
             static_cast<std::size_t>(head) * dims.head_dim;
    }
    const std::size_t layer_offset =
        layout == KvLayout::all_layers
            ? static_cast<std::size_t>(kLayer) * dims.num_kv_heads * dims.head_dim
            : 0;
    return layer_offset + static_cast<std::size_t>(slot) * token_stride() * max_ctx +
           static_cast<std::size_t>(token) * token_stride() +
           static_cast<std::size_t>(head) * dims.head_dim;
  }

  // Random K/V for every sequence's cached tokens [0, cached_len).
  void fill_cached(const HybridBatch& batch, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (const auto* list : {&batch.prefills, &batch.decodes}) {
      for (const BatchSequence& s : *list) {
        for (int t = 0; t < s.cached_len; ++t) {
          for (int h = 0; h < dims.num_kv_heads; ++h) {
            const std::size_t at = index(s.slot, t, h);
            for (int d = 0; d < dims.head_dim; ++d) {
              k[at + d] = to_bits(dims.dtype, normal(rng));
              v[at + d] = to_bits(dims.dtype, normal(rng));
            }
          }
        }
      }
    }
  }
};

}  // namespace vpod::attention::testing
