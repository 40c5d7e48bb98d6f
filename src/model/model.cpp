// The model: loading a checkpoint onto a backend (weights, activations) and
// the layer-by-layer forward of one hybrid batch over the backend's ops.
#include "model/model.h"

#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "common/log.h"
#include "kernels/rope/rope.h"
#include "model/communicator.h"
#include "model/weight_layout.h"

namespace vpod::model {

namespace {

// A [rows, heads, head_dim] view of columns [col, col + heads*head_dim).
TensorView sub3d(const TensorView& base, std::int64_t rows, std::int64_t heads,
                 std::int64_t head_dim, std::int64_t col) {
  auto* p = static_cast<std::uint8_t*>(base.data()) + col * dtype_size(base.dtype());
  return TensorView(p, base.dtype(), {rows, heads, head_dim}, {base.stride(0), head_dim, 1},
                    base.device());
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks the checkpoint holds exactly the tensors of the config's layout.
Status validate_checkpoint(const Checkpoint& ckpt, const ModelConfig& config,
                           const std::filesystem::path& dir) {
  std::set<std::string> expected;
  for (const WeightSpec& spec : weight_layout(config)) {
    expected.insert(spec.name);
    const WeightTensor* t = ckpt.find(spec.name);
    if (t == nullptr) {
      return data_loss(dir.string() + ": tensor '" + spec.name +
                       "' is missing from the checkpoint");
    }
    if (t->shape != spec.shape) {
      return data_loss(dir.string() + "/" + t->file + ": tensor '" + spec.name + "' has shape " +
                       shape_string(t->shape) + ", the config needs " + shape_string(spec.shape));
    }
  }
  for (const auto& [name, t] : ckpt.tensors()) {
    if (expected.count(name) != 0) continue;
    // Old Llama checkpoints store the RoPE table; it is recomputed, not read.
    if (name.ends_with(".self_attn.rotary_emb.inv_freq")) continue;
    return data_loss(dir.string() + "/" + t.file + ": unexpected tensor '" + name + "' for " +
                     std::string(architecture_name(config.arch)));
  }
  return {};
}

}  // namespace

Model::Model(Backend& backend, ModelConfig config, GenerationConfig generation,
             ModelOptions options)
    : backend_(backend),
      config_(std::move(config)),
      local_(config_),
      generation_config_(std::move(generation)),
      options_(options) {}

Model::~Model() = default;

std::size_t Model::kv_bytes_per_token() const {
  return 2 * static_cast<std::size_t>(local_.num_layers) * local_.kv_size() *
         dtype_size(kv_dtype());
}

Result<TensorView> Model::alloc_tensor(DType dtype, std::initializer_list<std::int64_t> shape) {
  std::size_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  VPOD_ASSIGN_OR_RETURN(auto buffer, backend_.allocate(n));
  TensorView view(buffer->data(), dtype, shape, backend_.device());
  buffers_.push_back(std::move(buffer));
  return view;
}

Result<std::unique_ptr<Model>> Model::load(const std::filesystem::path& dir, Backend& backend,
                                           const ModelOptions& options) {
  if (options.max_num_tokens < 1 || options.max_num_sequences < 1) {
    return invalid_argument("max_num_tokens and max_num_sequences must be >= 1");
  }
  VPOD_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  VPOD_ASSIGN_OR_RETURN(GenerationConfig generation, load_generation_config(dir));
  std::optional<Checkpoint> checkpoint;
  if (options.load_format == LoadFormat::safetensors) {
    auto opened = Checkpoint::open(dir);
    if (!opened.ok() && opened.status().code() == StatusCode::not_found) {
      return not_found(opened.status().message() +
                       " (a folder without weights, as `vpod make-model --no-weights` writes "
                       "one, loads with --load-format dummy)");
    }
    VPOD_ASSIGN_OR_RETURN(checkpoint, std::move(opened));
    VPOD_RETURN_IF_ERROR(validate_checkpoint(*checkpoint, config, dir));
  }
  const WeightSource source = checkpoint ? WeightSource::checkpoint(*checkpoint)
                                         : WeightSource::random(config, options.dummy_seed);
  const TensorParallel& tp = options.tensor_parallel;
  VPOD_ASSIGN_OR_RETURN(const ShardLayout shard, shard_layout(config, tp.size, tp.rank));
  if (tp.size > 1 &&
      (tp.comm == nullptr || tp.comm->size() != tp.size || tp.comm->rank() != tp.rank)) {
    return invalid_argument("tensor parallelism needs the rank's communicator of the group");
  }
  std::unique_ptr<Model> model(
      new Model(backend, std::move(config), std::move(generation), options));
  model->shard_ = shard;
  model->local_ = model::shard_config(model->config_, shard);
  if (model->options_.max_logit_rows <= 0) {
    model->options_.max_logit_rows = model->options_.max_num_sequences;
  }
  VPOD_RETURN_IF_ERROR(model->load_weights(source));
  VPOD_RETURN_IF_ERROR(model->allocate_activations());
  VPOD_RETURN_IF_ERROR(
      backend.reserve_step(model->options_.max_num_tokens, model->options_.max_num_sequences));
  return model;
}

Status Model::allocate_activations() {
  const ModelConfig& c = local_;
  const DType dt = backend_.compute_dtype();
  const std::int64_t t = options_.max_num_tokens;
  const std::int64_t rows = options_.max_logit_rows;
  const std::int64_t qkv = c.q_size() + 2 * static_cast<std::int64_t>(c.kv_size());
  const std::size_t before = buffers_.size();
  VPOD_ASSIGN_OR_RETURN(residual_, alloc_tensor(dt, {t, c.hidden_size}));
  VPOD_ASSIGN_OR_RETURN(hidden_, alloc_tensor(dt, {t, c.hidden_size}));
  VPOD_ASSIGN_OR_RETURN(delta_, alloc_tensor(dt, {t, c.hidden_size}));
  VPOD_ASSIGN_OR_RETURN(qkv_, alloc_tensor(dt, {t, qkv}));
  VPOD_ASSIGN_OR_RETURN(attn_out_, alloc_tensor(dt, {t, c.q_size()}));
  VPOD_ASSIGN_OR_RETURN(gate_up_,
                        alloc_tensor(dt, {t, 2 * static_cast<std::int64_t>(c.intermediate_size)}));
  VPOD_ASSIGN_OR_RETURN(act_, alloc_tensor(dt, {t, c.intermediate_size}));
  VPOD_ASSIGN_OR_RETURN(selected_, alloc_tensor(dt, {rows, c.hidden_size}));
  if (shard_.size > 1) {
    VPOD_ASSIGN_OR_RETURN(logits_local_, alloc_tensor(DType::f32, {rows, c.vocab_size}));
    VPOD_RETURN_IF_ERROR(options_.tensor_parallel.comm->reserve_gather(
        static_cast<std::size_t>(rows * c.vocab_size) * sizeof(float)));
  }
  // The whole vocabulary's logits: the sampler's input, on rank 0 only.
  if (shard_.rank == 0) {
    VPOD_ASSIGN_OR_RETURN(logits_, alloc_tensor(DType::f32, {rows, config_.vocab_size}));
  }
  activation_bytes_ = 0;
  for (std::size_t i = before; i < buffers_.size(); ++i) activation_bytes_ += buffers_[i]->bytes();
  return {};
}

namespace {

// The fields both view types share, checked against the model; `max_ctx`:
// tokens addressable per slot.
template <typename Kv>
Status check_view(const Kv& v, DType dtype, Device device, const ModelConfig& c) {
  if (v.dtype != dtype || v.device != device || v.num_kv_heads != c.num_kv_heads ||
      v.head_dim != c.head_dim) {
    return invalid_argument("KV view does not match the model (dtype " +
                            std::string(dtype_name(v.dtype)) + ", kv heads " +
                            std::to_string(v.num_kv_heads) + ", head_dim " +
                            std::to_string(v.head_dim) + ")");
  }
  return {};
}

}  // namespace

Status Model::validate_kv(const HybridBatch& batch, const KvCacheView& kv) const {
  const ModelConfig& c = local_;  // this rank's KV heads
  if (kv.num_layers() != c.num_layers) {
    return invalid_argument("forward got " + std::to_string(kv.num_layers()) + " KV views for " +
                            std::to_string(c.num_layers) + " layers");
  }
  int num_slots = 0;
  int max_ctx = 0;
  if (kv.is_paged()) {
    if (!backend_.supports_paged_kv(c.head_dim)) {
      return unimplemented(
          "the paged KV cache needs FlashInfer's paged kernels (fp16/bf16, head_dim "
          "128) on " +
          backend_.description());
    }
    for (const PagedKvView& p : kv.paged) {
      if (p.block_table == nullptr || p.block_size < 1 ||
          (p.block_size & (p.block_size - 1)) != 0 || p.max_blocks_per_slot < 1) {
        return invalid_argument("paged KV view needs a block table and a power-of-two block size");
      }
      VPOD_RETURN_IF_ERROR(check_view(p, kv_dtype(), backend_.device(), c));
    }
    num_slots = kv.paged[0].num_slots;
    max_ctx = kv.paged[0].max_blocks_per_slot * kv.paged[0].block_size;
  } else {
    for (const KvLayerView& v : kv.contiguous) {
      VPOD_RETURN_IF_ERROR(check_view(v, kv_dtype(), backend_.device(), c));
    }
    num_slots = kv.contiguous[0].num_slots;
    max_ctx = kv.contiguous[0].max_ctx;
  }
  auto check_seq = [&](const BatchSequence& s) -> Status {
    if (s.slot >= num_slots || s.context_len() > max_ctx) {
      return out_of_range("sequence in slot " + std::to_string(s.slot) + " with context " +
                          std::to_string(s.context_len()) + " exceeds the KV cache (" +
                          std::to_string(num_slots) + " slots, " + std::to_string(max_ctx) +
                          " tokens)");
    }
    return {};
  };
  for (const auto& s : batch.prefills) VPOD_RETURN_IF_ERROR(check_seq(s));
  for (const auto& s : batch.decodes) VPOD_RETURN_IF_ERROR(check_seq(s));
  return {};
}

Result<TensorView> Model::forward(const HybridBatch& batch, const KvCacheView& kv, StepPlan& plan,
                                  LogitsMode mode) {
  const ModelConfig& c = config_;
  kept_hidden_rows_ = 0;
  VPOD_RETURN_IF_ERROR(build_step_arrays(batch, mode, c.vocab_size, &step_arrays_));
  const int num_tokens = batch.num_tokens();
  const int num_rows = static_cast<int>(step_arrays_.logit_rows.size());
  if (num_tokens > options_.max_num_tokens) {
    return out_of_range("step has " + std::to_string(num_tokens) +
                        " tokens, the model was set up for " +
                        std::to_string(options_.max_num_tokens));
  }
  if (num_rows > options_.max_logit_rows) {
    return out_of_range("step needs " + std::to_string(num_rows) +
                        " logit rows, the model was set up for " +
                        std::to_string(options_.max_logit_rows));
  }
  VPOD_RETURN_IF_ERROR(validate_kv(batch, kv));

  StepTensors step;
  VPOD_RETURN_IF_ERROR(backend_.prepare_step(step_arrays_, batch, &step));
  // The previous step's plan is done with (prepare_step waited for the
  // stream, so its upload has run).
  plan.clear();
  const TensorView logits = shard_.rank == 0 ? logits_.slice(0, 0, num_rows) : logits_out(num_rows);

  // Decode-only steps run as one CUDA graph per launch shape (backend.h).
  const bool graphable = step_graphs_ && batch.prefills.empty() &&
                         mode == LogitsMode::last_per_sequence &&
                         num_tokens <= options_.max_graph_batch_size;
  // Planning the attention is host work that the GPU would wait for. A step
  // that runs eagerly through the unfused layer loop plans after enqueueing
  // the embedding and the first layer's norm and QKV projection, which the
  // GPU runs meanwhile; nothing has touched the KV cache yet if planning
  // fails. A graph step plans first: the capture replays the uploaded plan.
  // Kept hidden states need the unfused layer loop (the fused one normalizes
  // only the logit rows).
  const bool keep_hidden = mode == LogitsMode::last_keep_hidden;
  const bool fused = !keep_hidden && backend_.fused_decode(num_tokens, c.hidden_size);
  const bool plan_late = !graphable && !fused;
  if (!plan_late) VPOD_RETURN_IF_ERROR(plan_attention(step, kv, plan));
  StepGraph graph = StepGraph::eager;
  if (graphable) {
    VPOD_ASSIGN_OR_RETURN(graph, backend_.try_step_graph(step, plan, graph_key(kv)));
  }
  if (graph == StepGraph::launched) return logits;
  if (graph == StepGraph::capture) {
    VPOD_RETURN_IF_ERROR(backend_.begin_step_capture());
    const Status ran = run_ops(step, kv, plan, num_tokens, num_rows, fused, /*plan_late=*/false);
    if (!ran.ok()) {
      // An op failed to enqueue: nothing ran.
      backend_.cancel_step_capture();
      return ran;
    }
    const Status captured = backend_.end_step_capture();
    if (captured.ok()) return logits;
    // Nothing ran: log once, stop recording, run the step eagerly.
    VPOD_LOG_WARN("CUDA graph capture failed, decode steps run eagerly from now on: {}",
                  captured.to_string());
    step_graphs_ = false;
  }
  VPOD_RETURN_IF_ERROR(run_ops(step, kv, plan, num_tokens, num_rows, fused, plan_late));
  if (keep_hidden) kept_hidden_rows_ = num_tokens;
  return logits;
}

Result<TensorView> Model::row_logits(int first_row, int num_rows) {
  if (first_row < 0 || num_rows < 1 || first_row + num_rows > kept_hidden_rows_) {
    return out_of_range("row_logits: rows [" + std::to_string(first_row) + ", " +
                        std::to_string(first_row + num_rows) + ") outside the " +
                        std::to_string(kept_hidden_rows_) + " hidden states the last forward kept");
  }
  if (num_rows > options_.max_logit_rows) {
    return out_of_range("row_logits: " + std::to_string(num_rows) +
                        " rows, the model was set up for " +
                        std::to_string(options_.max_logit_rows));
  }
  VPOD_RETURN_IF_ERROR(backend_.linear(hidden_.slice(0, first_row, num_rows), lm_head_, nullptr,
                                       logits_out(num_rows)));
  VPOD_RETURN_IF_ERROR(gather_logits(num_rows));
  return shard_.rank == 0 ? logits_.slice(0, 0, num_rows) : logits_out(num_rows);
}

Status Model::plan_attention(const StepTensors& step, const KvCacheView& kv, StepPlan& plan) {
  const ModelConfig& c = local_;
  return backend_.plan_attention(step, c.num_q_heads, c.num_kv_heads, c.head_dim,
                                 kv.is_paged() ? &kv.paged[0] : nullptr, plan);
}

std::uint64_t Model::graph_key(const KvCacheView& kv) const {
  // splitmix64-style combine of every address and stride the ops bake in.
  std::uint64_t h = reinterpret_cast<std::uintptr_t>(this);
  auto mix = [&h](std::uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull;
  };
  for (const KvLayerView& v : kv.contiguous) {
    mix(reinterpret_cast<std::uintptr_t>(v.k));
    mix(reinterpret_cast<std::uintptr_t>(v.v));
    mix(static_cast<std::uint64_t>(v.slot_stride));
    mix(static_cast<std::uint64_t>(v.token_stride));
    mix(static_cast<std::uint64_t>(v.head_stride));
    mix(static_cast<std::uint64_t>(v.num_slots) << 32 | static_cast<std::uint32_t>(v.max_ctx));
  }
  for (const PagedKvView& p : kv.paged) {
    mix(reinterpret_cast<std::uintptr_t>(p.k));
    mix(reinterpret_cast<std::uintptr_t>(p.v));
    mix(static_cast<std::uint64_t>(p.block_stride));
    mix(static_cast<std::uint64_t>(p.token_stride));
    mix(static_cast<std::uint64_t>(p.head_stride));
    mix(static_cast<std::uint64_t>(p.num_slots) << 32 |
        static_cast<std::uint32_t>(p.max_blocks_per_slot));
    mix(reinterpret_cast<std::uintptr_t>(p.block_table));
    mix(static_cast<std::uint64_t>(p.num_blocks) << 32 | static_cast<std::uint32_t>(p.block_size));
  }
  return h;
}

Status Model::run_ops(const StepTensors& step, const KvCacheView& kv, StepPlan& plan,
                      int num_tokens, int num_rows, bool fused, bool plan_late) {
  const ModelConfig& c = local_;  // this rank's heads and slices
  Backend& b = backend_;
  const std::int64_t t = num_tokens;
  const TensorView residual = residual_.slice(0, 0, t);
  const TensorView hidden = hidden_.slice(0, 0, t);
  const TensorView delta = delta_.slice(0, 0, t);
  const TensorView qkv = qkv_.slice(0, 0, t);
  const TensorView attn_out = attn_out_.slice(0, 0, t);
  const TensorView gate_up = gate_up_.slice(0, 0, t);
  const TensorView act = act_.slice(0, 0, t);
  const TensorView q = sub3d(qkv, t, c.num_q_heads, c.head_dim, 0);
  const TensorView k = sub3d(qkv, t, c.num_kv_heads, c.head_dim, c.q_size());
  const TensorView v = sub3d(qkv, t, c.num_kv_heads, c.head_dim, c.q_size() + c.kv_size());
  const TensorView attn_out3 = sub3d(attn_out, t, c.num_q_heads, c.head_dim, 0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // A layer's attention half, from its qkv projection to the o projection's
  // output in delta; both layer loops below share it.
  auto attention_to_delta = [&](const LayerWeights& w, int l) -> Status {
    if (c.qk_norm) {
      b.head_rms_norm(q, w.q_norm, c.rms_norm_eps);
      b.head_rms_norm(k, w.k_norm, c.rms_norm_eps);
    }
    b.rope_kv_append(q, k, v, rope_, step, kv, l);
    VPOD_RETURN_IF_ERROR(b.attention(q, kv, l, step, plan, scale, attn_out3));
    // Row-parallel: each rank's partial sum; the bias is added once.
    const bool bias = c.o_bias && shard_.rank == 0;
    VPOD_RETURN_IF_ERROR(b.linear(attn_out, w.o, bias ? &w.o_bias : nullptr, delta));
    return all_reduce(delta);
  };

  // Vocab-parallel: ids outside this rank's rows embed as zeros.
  b.embedding(embed_, shard_.first_vocab(), step, residual);
  VPOD_RETURN_IF_ERROR(all_reduce(residual));
  if (fused) {
    VPOD_CHECK(!plan_late);
    // Few rows: every RMSNorm (with its residual add) runs inside the GEMV
    // that consumes it, SiLU*mul inside the gate/up GEMV. The residual stream
    // alternates between residual_ and hidden_ (hidden_ is not needed): the
    // GEMV that adds delta writes the sum to the other buffer.
    TensorView cur = residual;
    TensorView spare = hidden;
    auto normed = [&](const TensorView& weight, bool add) {
      NormedRows in;
      in.residual = cur;
      in.delta = add ? &delta : nullptr;
      in.weight = weight;
      in.eps = c.rms_norm_eps;
      in.residual_out = add ? &spare : nullptr;
      in.num_rows = num_tokens;
      return in;
    };
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& w = layers_[l];
      b.norm_linear(normed(w.input_norm, l > 0), w.qkv, c.qkv_bias ? &w.qkv_bias : nullptr, qkv);
      if (l > 0) std::swap(cur, spare);
      VPOD_RETURN_IF_ERROR(attention_to_delta(w, l));
      b.norm_linear_silu(normed(w.post_norm, true), w.gate_up, act);
      std::swap(cur, spare);
      VPOD_RETURN_IF_ERROR(b.linear(act, w.down, nullptr, delta));
      VPOD_RETURN_IF_ERROR(all_reduce(delta));
    }
    if (num_rows > 0 && b.decode_tuning().fuse_logits) {
      NormedRows last = normed(final_norm_, true);
      last.residual_out = nullptr;
      last.rows = step.logit_rows;
      last.num_rows = num_rows;
      b.norm_linear(last, lm_head_, nullptr, logits_out(num_rows));
    } else {
      b.add_rms_norm(cur, delta, final_norm_, c.rms_norm_eps, spare);
      const TensorView selected = selected_.slice(0, 0, num_rows);
      b.gather_rows(spare, step, selected);
      VPOD_RETURN_IF_ERROR(b.linear(selected, lm_head_, nullptr, logits_out(num_rows)));
    }
    return gather_logits(num_rows);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[l];
    if (l == 0) {
      b.rms_norm(residual, w.input_norm, c.rms_norm_eps, hidden);
    } else {
      b.add_rms_norm(residual, delta, w.input_norm, c.rms_norm_eps, hidden);
    }
    VPOD_RETURN_IF_ERROR(b.linear(hidden, w.qkv, c.qkv_bias ? &w.qkv_bias : nullptr, qkv));
    if (l == 0 && plan_late) VPOD_RETURN_IF_ERROR(plan_attention(step, kv, plan));
    VPOD_RETURN_IF_ERROR(attention_to_delta(w, l));
    b.add_rms_norm(residual, delta, w.post_norm, c.rms_norm_eps, hidden);
    VPOD_RETURN_IF_ERROR(b.linear(hidden, w.gate_up, nullptr, gate_up));
    b.silu_mul(gate_up, act);
    VPOD_RETURN_IF_ERROR(b.linear(act, w.down, nullptr, delta));
    VPOD_RETURN_IF_ERROR(all_reduce(delta));
  }
  b.add_rms_norm(residual, delta, final_norm_, c.rms_norm_eps, hidden);
  const TensorView selected = selected_.slice(0, 0, num_rows);
  b.gather_rows(hidden, step, selected);
  VPOD_RETURN_IF_ERROR(b.linear(selected, lm_head_, nullptr, logits_out(num_rows)));
  return gather_logits(num_rows);
}

// ---- tensor parallelism's collectives (no-ops at size 1) ----

Status Model::all_reduce(const TensorView& x) {
  if (shard_.size == 1) return {};
  return options_.tensor_parallel.comm->all_reduce_sum(x);
}

TensorView Model::logits_out(int num_rows) const {
  return (shard_.size == 1 ? logits_ : logits_local_).slice(0, 0, num_rows);
}

Status Model::gather_logits(int num_rows) {
  if (shard_.size == 1) return {};
  return options_.tensor_parallel.comm->gather_columns(
      logits_local_.slice(0, 0, num_rows),
      shard_.rank == 0 ? logits_.slice(0, 0, num_rows) : TensorView());
}

}  // namespace vpod::model
