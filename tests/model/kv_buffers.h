// A plain contiguous KV cache in backend memory for the model tests, per-layer
// layout [num_slots, max_ctx, kv_heads, head_dim] (the engine uses the
// vAttention cache of src/kvcache; benchmarks build their own in bench/).
#pragma once

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/kv_view.h"
#include "common/status.h"
#include "model/backend.h"
#include "model/model_config.h"

namespace vpod::model {

class KvCacheBuffers {
 public:
  static Result<KvCacheBuffers> create(Backend& backend, const ModelConfig& config, DType dtype,
                                       int num_slots, int max_ctx) {
    if (num_slots < 1 || max_ctx < 1) return invalid_argument("KV cache needs slots and context");
    KvCacheBuffers cache;
    const std::int64_t token_elems =
        static_cast<std::int64_t>(config.num_kv_heads) * config.head_dim;
    const std::size_t bytes =
        static_cast<std::size_t>(num_slots) * max_ctx * token_elems * dtype_size(dtype);
    for (int l = 0; l < config.num_layers; ++l) {
      VPOD_ASSIGN_OR_RETURN(auto k, backend.allocate(bytes));
      VPOD_ASSIGN_OR_RETURN(auto v, backend.allocate(bytes));
      KvLayerView view;
      view.k = k->data();
      view.v = v->data();
      view.dtype = dtype;
      view.device = backend.device();
      view.num_slots = num_slots;
      view.max_ctx = max_ctx;
      view.num_kv_heads = config.num_kv_heads;
      view.head_dim = config.head_dim;
      view.head_stride = config.head_dim;
      view.token_stride = token_elems;
      view.slot_stride = token_elems * max_ctx;
      cache.views_.push_back(view);
      cache.buffers_.push_back(std::move(k));
      cache.buffers_.push_back(std::move(v));
    }
    return cache;
  }
  std::span<const KvLayerView> views() const { return views_; }
  // Every layer, as Model::forward takes it (valid while this object lives).
  KvCacheView view() const { return {.contiguous = views_, .paged = {}}; }

 private:
  std::vector<std::unique_ptr<BackendBuffer>> buffers_;
  std::vector<KvLayerView> views_;
};

}  // namespace vpod::model
