// The interface the model's forward pass (model.cpp) is written against, in
// groups: memory, per-step metadata, attention planning, step graphs, tensor
// ops, decode fusions, sampling, and op timing for benchmarks. Two
// implementations: CpuBackend (fp32 math from any stored dtype; the
// correctness reference, runs tiny models in CI) and CudaBackend (cuBLASLt
// GEMMs and fused kernels in fp16/bf16/fp32; cuda_backend.cpp and the
// cuda_*.h files beside it).
//
// Conventions: every TensorView passed in lives on the backend's device and
// has the backend's compute dtype unless stated otherwise; rows are tokens of
// the step's flattened batch. Shapes are checked (VPOD_CHECK: a mismatch is a
// bug in the caller, the model validated user input at load). Ops whose
// launch can fail at run time (cuBLASLt, the attention launchers) return a
// Status, which the model returns from forward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/check.h"
#include "common/dtype.h"
#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "kernels/attention/attention.h"
#include "kernels/gemm/gemv.h"
#include "kernels/rope/rope.h"
#include "kernels/sampling/sampling.h"
#include "model/step_plan.h"

namespace vpod::model {

// Memory owned by a backend (host memory for the CPU, device memory for CUDA).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  virtual void* data() const = 0;
  virtual std::size_t bytes() const = 0;
};

// One step's metadata, copied once per step into the backend's memory by
// prepare_step and read by every layer. Pointers are backend-memory arrays.
struct StepTensors {
  int num_tokens = 0;
  int num_sequences = 0;  // prefills first, then decodes (HybridBatch order)
  int num_logit_rows = 0;
  const std::int32_t* token_ids = nullptr;         // [num_tokens]
  const std::int32_t* positions = nullptr;         // [num_tokens] RoPE positions
  const std::int32_t* token_slots = nullptr;       // [num_tokens] KV slot of each token
  const std::int32_t* token_kv_index = nullptr;    // [num_tokens] cache row = cached_len + i
  const std::int32_t* seq_slot = nullptr;          // [num_sequences]
  const std::int32_t* seq_cached_len = nullptr;    // [num_sequences]
  const std::int32_t* seq_num_new = nullptr;       // [num_sequences]
  const std::int32_t* seq_token_offset = nullptr;  // [num_sequences]
  const std::int32_t* logit_rows = nullptr;  // [num_logit_rows] token rows whose logits we need
  const HybridBatch* batch = nullptr;        // the host batch (planners read it)
};

enum class LogitsMode : std::uint8_t {
  last_per_sequence,  // one row per sequence: its last new token
  all_tokens,         // every token of the step (tests)
  // As last_per_sequence, and every token's final hidden state is kept for
  // Model::row_logits (prompt logprobs, scored in bounded slices).
  last_keep_hidden,
};

struct StepArrays;

// The rotary embedding's inverse frequencies, [head_dim / 2] fp32 in
// backend memory (see kernels/rope/rope.h for how they are computed).
struct RopeTable {
  const float* inv_freq = nullptr;
  int head_dim = 0;
};

// GPU time per op category over the ops run since timing was enabled
// (benchmarks' step-time breakdown).
struct OpTimes {
  double gemm_ms = 0.0;
  double attention_ms = 0.0;
  double other_ms = 0.0;  // norms, RoPE + KV append, SiLU, gathers
  int num_ops = 0;
};

// What try_step_graph decided for the current step.
enum class StepGraph : std::uint8_t {
  launched,  // a graph recorded for this step's launch shape was enqueued: done
  capture,   // shape seen before: record it (begin/end_step_capture) now
  eager,     // first sighting (or graphs off): run the ops one by one
};

// Rows of the residual stream normalized inside the following GEMM (decode
// fusion, Backend::norm_linear): x[m] = rms_norm(residual[r] + delta[r]) *
// weight with r = rows ? rows[m] : m; residual_out[m] receives
// residual[r] + delta[r] (it must not alias residual or delta).
struct NormedRows {
  TensorView residual;                // [>= rows, hidden]
  const TensorView* delta = nullptr;  // [>= rows, hidden], or null: no residual add
  TensorView weight;                  // [hidden]
  float eps = 0.0f;
  const TensorView* residual_out = nullptr;  // [rows, hidden], or null
  const std::int32_t* rows = nullptr;        // backend array [num_rows], or null
  int num_rows = 0;
};

// How the CUDA backend runs small decode steps (benchmarks compare them):
// fuse: RMSNorm (+ residual add) in the prologue of the following GEMV and
// SiLU*mul in the gate/up GEMV's epilogue (Backend::fused_decode);
// fuse_logits: with fuse, the final norm and the logit-row gather in the
// LM-head GEMV too (else the separate norm and gather kernels); pdl:
// programmatic dependent launch of the GEMV and RoPE kernels;
// pdl_early_trigger: let the next kernel launch when this one has started;
// gemv_max_rows: GEMMs of at most this many rows use the GEMV kernel (1 to
// kernels::kMaxGemvRows), larger ones cuBLASLt.
struct DecodeTuning {
  bool fuse = false;
  bool fuse_logits = true;
  bool pdl = false;
  bool pdl_early_trigger = false;
  int gemv_max_rows = kernels::kMaxGemvRows;
};

// Counters of the step-graph cache (tests, benchmarks).
struct StepGraphStats {
  int captured = 0;  // graphs recorded
  int launched = 0;  // steps run by replaying a graph
  int cached = 0;    // graphs held now
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Per-op timing (events around each op: adds a little overhead, for
  // benchmarks only). The CPU backend does not time.
  virtual void set_op_timing(bool enabled) { (void)enabled; }
  // Synchronizes, returns the times since the last call and resets them.
  virtual OpTimes take_op_times() { return {}; }

  virtual Device device() const = 0;
  virtual DType compute_dtype() const = 0;
  virtual std::string description() const = 0;
  // The CUDA stream every op is enqueued on (a tensor-parallel rank's NCCL
  // collectives go on it too, so step graphs capture them); null on the CPU.
  virtual cudaStream_t stream() const { return nullptr; }

  // ---- memory (start-up only; nothing on the step path allocates) ----
  virtual Result<std::unique_ptr<BackendBuffer>> allocate(std::size_t bytes) = 0;
  // Copies `numel` host elements of `src_dtype` to `dst` (backend memory),
  // converting to `dst_dtype`.
  virtual Status upload(const void* src, DType src_dtype, std::int64_t numel, void* dst,
                        DType dst_dtype) = 0;
  // Copies backend memory to the host (synchronizes).
  virtual Status download(const void* src, std::size_t bytes, void* dst) = 0;
  virtual Status synchronize() = 0;
  // Whether all work issued so far has finished, without waiting (the CPU
  // backend's work finishes before its calls return). An error counts as
  // finished: the next synchronizing call reports it.
  virtual bool idle() { return true; }

  // ---- per step ----
  // Sizes the metadata buffers once for the largest step.
  virtual Status reserve_step(int max_tokens, int max_sequences) = 0;
  // Copies the step's validated arrays (step_metadata.h) into backend memory
  // and points `out` at them.
  virtual Status prepare_step(const StepArrays& arrays, const HybridBatch& batch,
                              StepTensors* out) = 0;

  // Plans the step's attention for the model's heads into `plan` (the
  // caller's, reused across steps; CUDA: the kernels' plan, uploaded to the
  // plan's buffers on the stream, outside any graph capture). Once per step,
  // before the first layer's attention; the model calls it after enqueueing
  // layer 0's QKV projection on eager steps, so the GPU works while the host
  // plans. `paged_kv`: a layer of the paged cache the step's attention reads
  // (its block tables current), null for a contiguous cache. The CPU backend
  // needs no plan.
  virtual Status plan_attention(const StepTensors& step, int num_q_heads, int num_kv_heads,
                                int head_dim, const PagedKvView* paged_kv, StepPlan& plan) {
    (void)step, (void)num_q_heads, (void)num_kv_heads, (void)head_dim;
    plan.clear();
    plan.paged_kv = paged_kv != nullptr;
    plan.ready = true;
    return {};
  }

  // ---- graphs of whole steps (decode-only steps; the model decides when) ----
  // Call after prepare_step and plan_attention. A step's launch shape is
  // everything the recorded launches bake in: token, sequence and logit-row
  // counts, the plan's work-list sizes, launch configuration and buffers,
  // and `caller_key`, which the caller derives from every other address the
  // ops bake in (its weights, activations and KV views). The per-step data
  // (token ids, positions, slots, plan contents) lives in fixed device
  // buffers uploaded before the launch.
  virtual Result<StepGraph> try_step_graph(const StepTensors& step, const StepPlan& plan,
                                           std::uint64_t caller_key) {
    (void)step, (void)plan, (void)caller_key;
    return StepGraph::eager;
  }
  // Records the ops enqueued until end_step_capture (they do not run), then
  // end_step_capture instantiates the graph, caches it under the launch
  // shape try_step_graph saw and launches it. On an error nothing ran: run
  // eagerly. cancel_step_capture ends a recording whose ops failed to
  // enqueue, discarding it (nothing ran).
  virtual Status begin_step_capture() { return unimplemented("step graphs"); }
  virtual Status end_step_capture() { return unimplemented("step graphs"); }
  virtual void cancel_step_capture() {}
  virtual StepGraphStats step_graph_stats() const { return {}; }

  // ---- ops ----
  // out[t, :] = table[token_ids[t] - first_id, :]         table [rows, hidden]
  // The table holds ids [first_id, first_id + rows) (a tensor-parallel rank's
  // vocab slice; first_id 0 and every id otherwise); other ids give zeros.
  virtual void embedding(const TensorView& table, std::int64_t first_id, const StepTensors& step,
                         const TensorView& out) = 0;
  // out[t] = x[t] / rms(x[t]) * weight                        x, out [T, hidden]
  virtual void rms_norm(const TensorView& x, const TensorView& weight, float eps,
                        const TensorView& out) = 0;
  // residual[t] += delta[t]; out[t] = rms_norm(residual[t])  all [T, hidden]
  virtual void add_rms_norm(const TensorView& residual, const TensorView& delta,
                            const TensorView& weight, float eps, const TensorView& out) = 0;
  // out[T, N] = x[T, K] * weight[N, K]^T (+ bias[N]); out may be fp32 when
  // the compute dtype is not (logits).
  virtual Status linear(const TensorView& x, const TensorView& weight, const TensorView* bias,
                        const TensorView& out) = 0;
  // Per-head RMSNorm in place: x [T, heads, head_dim] (row stride may exceed
  // heads * head_dim), weight [head_dim]. Qwen3's q_norm / k_norm.
  virtual void head_rms_norm(const TensorView& x, const TensorView& weight, float eps) = 0;
  // Rotates q [T, q_heads, D] and k [T, kv_heads, D] in place (rotate-half
  // convention) at step.positions, then writes k and v [T, kv_heads, D] into
  // layer `layer` of the cache at (token_slots[t], token_kv_index[t]);
  // contiguous or paged (see supports_paged_kv).
  virtual void rope_kv_append(const TensorView& q, const TensorView& k, const TensorView& v,
                              const RopeTable& rope, const StepTensors& step, const KvCacheView& kv,
                              int layer) = 0;
  // Causal attention of every new query over its sequence's cache (layer
  // `layer` of kv) as `plan` (plan_attention, this step) says: q, out
  // [T, q_heads, D]; query i of a sequence sees cache rows [0, cached_len + i].
  virtual Status attention(const TensorView& q, const KvCacheView& kv, int layer,
                           const StepTensors& step, const StepPlan& plan, float scale,
                           const TensorView& out) = 0;
  // Whether rope_kv_append / attention read a paged cache for this head_dim
  // (CUDA: FlashInfer's paged kernels, fp16/bf16, head_dim 128).
  virtual bool supports_paged_kv(int head_dim) const = 0;
  // What runs attention over a paged cache, for reports and logs (CUDA:
  // FlashInfer's kernels and version for this device and attention mode).
  virtual std::string paged_attention_description() const = 0;
  // out[t, i] = silu(gate_up[t, i]) * gate_up[t, I + i]      gate_up [T, 2I], out [T, I]
  virtual void silu_mul(const TensorView& gate_up, const TensorView& out) = 0;
  // out[r, :] = x[step.logit_rows[r], :]                    out [num_logit_rows, hidden]
  virtual void gather_rows(const TensorView& x, const StepTensors& step, const TensorView& out) = 0;

  // ---- decode fusions (CUDA; the model checks fused_decode first) ----
  // Whether norm_linear / norm_linear_silu run a step of `num_tokens` rows
  // of `hidden_size` (their results equal the unfused ops' bit for bit).
  virtual bool fused_decode(int num_tokens, int hidden_size) const {
    (void)num_tokens, (void)hidden_size;
    return false;
  }
  // out = x * weight^T (+ bias) with x = the normalized rows of `in`.
  virtual void norm_linear(const NormedRows& in, const TensorView& weight, const TensorView* bias,
                           const TensorView& out) {
    (void)in, (void)weight, (void)bias, (void)out;
    VPOD_CHECK_MSG(false, "norm_linear without fused_decode");
  }
  // out[m, i] = silu(g[m, i]) * g[m, I + i] with g = x * gate_up^T.
  virtual void norm_linear_silu(const NormedRows& in, const TensorView& gate_up,
                                const TensorView& out) {
    (void)in, (void)gate_up, (void)out;
    VPOD_CHECK_MSG(false, "norm_linear_silu without fused_decode");
  }
  // Benchmarks: switch the decode tuning (drops recorded step graphs).
  virtual void set_decode_tuning(const DecodeTuning& tuning) { (void)tuning; }
  virtual DecodeTuning decode_tuning() const { return {.fuse = false}; }

  // ---- sampling ----
  // Samples the requests' rows of fp32 logits [rows, vocab] in this
  // backend's memory (forward's result) with kernels::sample's semantics;
  // penalties may be applied to those rows in place. CPU: sample() per row.
  // CUDA: the GPU sampler (kernels/sampling/sampling_gpu.h) on the backend's
  // stream; only the results come back to the host.
  virtual Status sample(const TensorView& logits, std::span<const kernels::SampleRequest> requests,
                        std::span<kernels::SampleResult> out) = 0;
};

// CPU backend (always available).
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);

}  // namespace vpod::model

namespace vpod::model {

// How a hybrid batch's attention runs (--attention serial | pod): the
// kernels' own enum (kernels/attention/pod.h).
using attention::AttentionMode;

enum class AttentionImpl : std::uint8_t {
  kernels,  // src/kernels/attention prefill + decode (fp16/bf16, head_dim 64/128),
            // the simple kernel for anything they do not cover
  simple,   // always the simple exact kernel (src/model/simple_attention.h)
};

struct CudaBackendOptions {
  DType dtype = DType::bf16;  // activations, weights and KV cache
  int device = 0;
  AttentionImpl attention = AttentionImpl::kernels;
  // serial or pod (attention::hybrid_attention: the fused kernel on hybrid
  // steps, the serial kernels on prefill- or decode-only steps). A build
  // without the POD launcher fails at creation (pod_attention_built()),
  // never falling back to serial silently.
  AttentionMode attention_mode = AttentionMode::serial;
  // Decode GEMMs with M <= kMaxGemvRows use the GEMV kernel (gemv.h) instead
  // of cuBLASLt (off: benchmarks' comparison).
  bool gemv = true;
  // Decode fusions and programmatic dependent launch (see DecodeTuning).
  DecodeTuning decode{};
  // The attention kernels' variant switches (benchmarks compare them; the
  // defaults are the kernels the plan is measured with).
  attention::KernelOptions kernels{};
  // Step graphs kept at most (least recently used evicted).
  int max_step_graphs = 128;
  std::size_t gemm_workspace_bytes = 32u << 20;
};

// The CUDA backend, or why it is unavailable (no GPU, no cuBLASLt, or
// attention mode pod in a build without the POD launcher).
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options);

}  // namespace vpod::model
