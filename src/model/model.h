// The model runtime's public API: load a Hugging Face folder onto a backend,
// then run forward steps over hybrid batches.
//
//   auto backend = model::make_cpu_backend();            // or make_cuda_backend()
//   auto model = model::Model::load(dir, *backend, {.max_num_tokens = 2048});
//   KvCacheView kv = store.view();                        // every layer of a KV cache
//   StepPlan plan;                                        // reused step after step
//   auto logits = model->forward(batch, kv, plan);        // [num_sequences, vocab] fp32
//
// The forward is written once against Backend (backend.h). The model owns its
// weights and activation buffers (sized at load for max_num_tokens), never
// the KV cache (the caller's KvCacheView, contiguous or paged) nor the
// attention plan (the caller's StepPlan).
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "common/status.h"
#include "model/backend.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/step_metadata.h"
#include "model/step_plan.h"
#include "model/tensor_parallel.h"
#include "model/weight_source.h"

namespace vpod::model {

struct ModelOptions {
  int max_num_tokens = 2048;    // flattened tokens per step (activation buffers)
  int max_num_sequences = 256;  // sequences per step (logit rows)
  // Rows of logits the largest step can ask for in LogitsMode::all_tokens;
  // 0 means max_num_sequences (all_tokens then needs num_tokens <= this).
  int max_logit_rows = 0;
  // Decode-only steps of at most this many sequences run as CUDA graphs
  // (backends that support them); 0 turns graphs off.
  int max_graph_batch_size = 256;
  // This model's rank in a tensor-parallel group (tensor_parallel.h): it
  // loads and computes its shard only, and meets the other ranks' models in
  // the communicator's collectives. Size 1: the whole model.
  TensorParallel tensor_parallel{};
  // Where the weights come from (vLLM's --load-format): the folder's
  // safetensors, or make-model's random weights for `dummy_seed` made in
  // memory (model/weight_source.h), which needs only config.json.
  LoadFormat load_format = LoadFormat::safetensors;
  std::uint64_t dummy_seed = 0;
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::filesystem::path& dir, Backend& backend,
                                             const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The whole model's config (what the checkpoint holds and the engine sees).
  const ModelConfig& config() const { return config_; }
  // This rank's shard: its heads, KV heads, intermediate and vocab slices
  // (equal to config() at tensor-parallel size 1). Its KV cache holds
  // shard_config().num_kv_heads heads.
  const ModelConfig& shard_config() const { return local_; }
  const ShardLayout& shard() const { return shard_; }
  const GenerationConfig& generation_config() const { return generation_config_; }
  Backend& backend() const { return backend_; }
  const ModelOptions& options() const { return options_; }
  // Bytes of weights and of activation buffers on the backend.
  std::size_t weight_bytes() const { return weight_bytes_; }
  std::size_t activation_bytes() const { return activation_bytes_; }
  // KV-cache element type this model writes (the backend's compute dtype).
  DType kv_dtype() const { return backend_.compute_dtype(); }
  // Bytes of K+V per token across all layers of this rank's KV heads.
  std::size_t kv_bytes_per_token() const;

  // One step. Returns fp32 logits [rows, vocab_size] in backend memory, valid
  // until the next forward (under tensor parallelism every rank runs the
  // step; rank 0 returns the whole vocabulary's logits, the others their
  // vocab slice [rows, shard_config().vocab_size]): one row per sequence (prefills, then decodes)
  // or, with LogitsMode::all_tokens, one per token. K/V of the step's tokens are written to `kv`
  // (every layer of one cache: contiguous, or the paged baseline whose block tables are already
  // where the backend reads them, which needs backend().supports_paged_kv(head_dim)) before
  // attention reads them. `plan` receives the step's attention plan (Backend:: plan_attention);
  // pass the same StepPlan every step so its buffers are reused. A failed op (a launch or the
  // planner) is returned.
  Result<TensorView> forward(const HybridBatch& batch, const KvCacheView& kv, StepPlan& plan,
                             LogitsMode mode = LogitsMode::last_per_sequence);

  // Logits [num_rows, vocab] fp32 of the flattened rows [first_row,
  // first_row + num_rows) of the last forward, which must have run with
  // LogitsMode::last_keep_hidden; num_rows <= options().max_logit_rows. They
  // overwrite that forward's logits (sample those first: on the backend's
  // stream, a sampler that read them has finished). Valid until the next
  // forward or row_logits.
  Result<TensorView> row_logits(int first_row, int num_rows);

  // Turns step graphs on or off (benchmarks, tests: graph == eager). On by
  // default when options().max_graph_batch_size > 0.
  void set_step_graphs(bool enabled) { step_graphs_ = enabled; }
  bool step_graphs() const { return step_graphs_; }

 private:
  struct LayerWeights {
    TensorView input_norm, post_norm;
    TensorView qkv, qkv_bias;  // fused [q + 2kv, hidden], [q + 2kv]
    TensorView o, o_bias;
    TensorView q_norm, k_norm;
    TensorView gate_up, down;  // fused [2I, hidden]; [hidden, I]
  };

  Model(Backend& backend, ModelConfig config, GenerationConfig generation, ModelOptions options);
  Status load_weights(const WeightSource& source);
  Status allocate_activations();
  Result<TensorView> alloc_tensor(DType dtype, std::initializer_list<std::int64_t> shape);
  // Checks the view against the model and the batch against the view.
  Status validate_kv(const HybridBatch& batch, const KvCacheView& kv) const;
  // Enqueues the step's ops (embedding through logits) on the backend:
  // through the fused decode loop when `fused` (Backend::fused_decode). With
  // `plan_late` (unfused layer loop only) it plans the step's attention after
  // the first layer's QKV projection.
  Status run_ops(const StepTensors& step, const KvCacheView& kv, StepPlan& plan, int num_tokens,
                 int num_rows, bool fused, bool plan_late);
  Status plan_attention(const StepTensors& step, const KvCacheView& kv, StepPlan& plan);
  // The row-parallel sum at the end of o_proj and down_proj, and of the
  // vocab-parallel embedding: an all-reduce under tensor parallelism,
  // nothing at size 1.
  Status all_reduce(const TensorView& x);
  // The LM head's output: this rank's vocab slice [rows, local vocab] (the
  // whole logits at size 1), gathered into logits_ on rank 0.
  TensorView logits_out(int num_rows) const;
  Status gather_logits(int num_rows);
  // Identifies the addresses a recorded step bakes in beyond the backend's
  // own buffers: this model's, and the KV views and block tables.
  std::uint64_t graph_key(const KvCacheView& kv) const;

  Backend& backend_;
  ModelConfig config_;
  ModelConfig local_;  // shard_config()
  ShardLayout shard_;
  GenerationConfig generation_config_;
  ModelOptions options_;
  std::vector<std::unique_ptr<BackendBuffer>> buffers_;
  std::size_t weight_bytes_ = 0;
  std::size_t activation_bytes_ = 0;

  TensorView embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_host_;
  RopeTable rope_;

  // Activations, [max_num_tokens, ...].
  TensorView residual_, hidden_, qkv_, attn_out_, delta_, gate_up_, act_;
  TensorView selected_, logits_;  // [max_logit_rows, hidden], [max_logit_rows, vocab] fp32
  // [max_logit_rows, local vocab] fp32: the LM head's slice under tensor
  // parallelism (empty at size 1, where the head writes logits_).
  TensorView logits_local_;
  StepArrays step_arrays_;
  // Rows of hidden_ that hold the final normed hidden state (the last
  // forward ran with LogitsMode::last_keep_hidden); 0 otherwise.
  int kept_hidden_rows_ = 0;
  bool step_graphs_ = true;
};

}  // namespace vpod::model
