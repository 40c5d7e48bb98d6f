// A paged KV cache for the model tests: per-layer K/V block pools in backend
// memory and one block table whose rows hold a shuffled permutation of the
// blocks, so every block boundary jumps somewhere else in the pool.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "common/kv_view.h"
#include "model/model.h"

namespace vpod::model::testing {

struct PagedKv {
  std::vector<std::unique_ptr<BackendBuffer>> buffers;
  std::vector<PagedKvView> views;
  std::vector<std::int32_t> table;  // host copy of the block table
};

// `copy_table(dst, src, bytes)` copies the host table into backend memory.
inline PagedKv make_paged_kv(
    Backend& backend, const ModelConfig& c, int num_slots, int max_ctx, int block_size,
    const std::function<void(void*, const void*, std::size_t)>& copy_table) {
  PagedKv kv;
  const int per_slot = (max_ctx + block_size - 1) / block_size;
  const int num_blocks = num_slots * per_slot + 5;  // a few never used
  std::vector<std::int32_t> table(static_cast<std::size_t>(num_slots) * per_slot);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(17));
  std::copy_n(perm.begin(), table.size(), table.begin());
  auto table_buffer = backend.allocate(table.size() * sizeof(std::int32_t));
  EXPECT_TRUE(table_buffer.ok());
  copy_table((*table_buffer)->data(), table.data(), table.size() * sizeof(std::int32_t));
  const std::int64_t token = static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
  const std::size_t pool_bytes = static_cast<std::size_t>(num_blocks) * block_size * token *
                                 dtype_size(backend.compute_dtype());
  for (int l = 0; l < c.num_layers; ++l) {
    auto k = backend.allocate(pool_bytes);
    auto v = backend.allocate(pool_bytes);
    EXPECT_TRUE(k.ok() && v.ok());
    PagedKvView view;
    view.k = (*k)->data();
    view.v = (*v)->data();
    view.dtype = backend.compute_dtype();
    view.device = backend.device();
    view.num_blocks = num_blocks;
    view.block_size = block_size;
    view.num_kv_heads = c.num_kv_heads;
    view.head_dim = c.head_dim;
    view.block_stride = block_size * token;
    view.token_stride = token;
    view.head_stride = c.head_dim;
    view.block_table = static_cast<const std::int32_t*>((*table_buffer)->data());
    view.num_slots = num_slots;
    view.max_blocks_per_slot = per_slot;
    kv.views.push_back(view);
    kv.buffers.push_back(std::move(k).value());
    kv.buffers.push_back(std::move(v).value());
  }
  kv.buffers.push_back(std::move(table_buffer).value());
  kv.table = std::move(table);
  return kv;
}

// Prefill of 4 prompts (one longer than a block many times over), a hybrid
// step (a continuing chunk + decodes), then 6 decode steps of all four.
inline std::vector<HybridBatch> paged_scenario(int vocab) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  std::vector<HybridBatch> steps;
  const int lens[] = {33, 1, 70, 16};
  int context[] = {0, 0, 0, 0};
  HybridBatch p;
  int offset = 0;
  for (int s = 0; s < 4; ++s) {
    p.prefills.push_back({.slot = s, .cached_len = 0, .num_new = lens[s], .token_offset = offset});
    for (int i = 0; i < lens[s]; ++i) {
      p.token_ids.push_back(tok(rng));
      p.positions.push_back(i);
    }
    offset += lens[s];
    context[s] = lens[s];
  }
  steps.push_back(p);
  HybridBatch h;
  h.prefills.push_back({.slot = 2, .cached_len = 70, .num_new = 21, .token_offset = 0});
  for (int i = 0; i < 21; ++i) {
    h.token_ids.push_back(tok(rng));
    h.positions.push_back(70 + i);
  }
  context[2] += 21;
  offset = 21;
  for (int s : {0, 1, 3}) {
    h.decodes.push_back(
        {.slot = s, .cached_len = context[s], .num_new = 1, .token_offset = offset++});
    h.token_ids.push_back(tok(rng));
    h.positions.push_back(context[s]++);
  }
  steps.push_back(h);
  for (int step = 0; step < 6; ++step) {
    HybridBatch d;
    for (int s = 0; s < 4; ++s) {
      d.decodes.push_back({.slot = s, .cached_len = context[s], .num_new = 1, .token_offset = s});
      d.token_ids.push_back(tok(rng));
      d.positions.push_back(context[s]++);
    }
    steps.push_back(d);
  }
  return steps;
}

}  // namespace vpod::model::testing
