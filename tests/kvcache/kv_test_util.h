// Shared by the kvcache tests: host providers, configs, and a pattern written
// and checked through KvLayerView strides (so every test exercises the views
// exactly as an attention kernel would address them).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "common/kv_view.h"
#include "kvcache/fault_injection.h"
#include "kvcache/host_vmm.h"
#include "kvcache/kv_cache.h"

namespace vpod::kvcache::testing {

inline std::shared_ptr<HostVmmProvider> make_host_provider(std::size_t page_bytes) {
  auto provider = HostVmmProvider::create(page_bytes);
  VPOD_CHECK_MSG(provider.ok(), provider.status().to_string());
  return std::shared_ptr<HostVmmProvider>(std::move(provider).value());
}

// A value unique to (tag, layer, K/V, token, head, d) that survives fp32.
inline float pattern(std::uint32_t tag, int layer, int kv, std::int64_t token, int head, int d) {
  std::uint32_t h = tag * 2654435761u ^ static_cast<std::uint32_t>(layer) * 97u ^
                    static_cast<std::uint32_t>(kv) * 7919u ^
                    static_cast<std::uint32_t>(token) * 40503u ^
                    static_cast<std::uint32_t>(head) * 131u ^ static_cast<std::uint32_t>(d) * 31u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h & 0xffffff);  // exact in fp32
}

inline float* element(const KvLayerView& view, int kv, int slot, std::int64_t token, int head,
                      int d) {
  auto* base = static_cast<float*>(kv == 0 ? view.k : view.v);
  return base + slot * view.slot_stride + token * view.token_stride + head * view.head_stride + d;
}

// Element (kv, slot, token, head, d) of a paged layer (fp32 pools), found
// through the slot's block table as a paged-attention kernel finds it.
inline float* paged_element(const PagedKvView& view, int kv, int slot, std::int64_t token, int head,
                            int d) {
  const std::int32_t block =
      view.block_table[slot * view.max_blocks_per_slot + token / view.block_size];
  auto* pool = static_cast<float*>(kv == 0 ? view.k : view.v);
  return pool + block * view.block_stride + (token % view.block_size) * view.token_stride +
         head * view.head_stride + d;
}

// Writes tokens [begin, end) of `slot`, all layers, K and V (fp32 caches).
inline void write_tokens(const KvCache& cache, int slot, std::uint32_t tag, std::int64_t begin,
                         std::int64_t end) {
  const KvShape& shape = cache.config().shape;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const KvLayerView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv) {
      for (std::int64_t t = begin; t < end; ++t) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int d = 0; d < shape.head_dim; ++d) {
            *element(view, kv, slot, t, h, d) = pattern(tag, layer, kv, t, h, d);
          }
        }
      }
    }
  }
}

// Number of elements of tokens [begin, end) that differ from the pattern.
inline std::int64_t count_mismatches(const KvCache& cache, int slot, std::uint32_t tag,
                                     std::int64_t begin, std::int64_t end) {
  const KvShape& shape = cache.config().shape;
  std::int64_t bad = 0;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const KvLayerView view = cache.layer_view(layer);
    for (int kv = 0; kv < 2; ++kv) {
      for (std::int64_t t = begin; t < end; ++t) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          for (int d = 0; d < shape.head_dim; ++d) {
            bad += *element(view, kv, slot, t, h, d) != pattern(tag, layer, kv, t, h, d);
          }
        }
      }
    }
  }
  return bad;
}

// Small fp32 shapes whose token size does not divide the page: all-layers
// tokens are 3 * 2 * 8 * 4 = 192 bytes, so 4 KiB pages hold 21.33 tokens and
// tokens straddle page boundaries; per-layer tokens are 64 bytes.
inline KvCacheConfig small_config(KvLayout layout, GrowthMode growth, std::size_t pages) {
  KvCacheConfig config;
  config.shape = KvShape{3, 2, 8, DType::f32};
  config.layout = layout;
  config.max_slots = 8;
  config.max_ctx = 300;
  config.memory_bytes = pages * 4096;
  config.growth = growth;
  return config;
}

}  // namespace vpod::kvcache::testing
