// The small set of operations the model's forward pass is written against.
// Two implementations: CpuBackend (fp32 math from any stored dtype; the
// correctness reference, runs tiny models in CI) and CudaBackend (cuBLASLt
// GEMMs and fused kernels in fp16/bf16/fp32). The forward (model.cpp) is
// written once over this interface.
//
// Conventions: every TensorView passed in lives on the backend's device and
// has the backend's compute dtype unless stated otherwise; rows are tokens of
// the step's flattened batch. Shapes are checked (VPOD_CHECK: a mismatch is a
// bug in the caller, the model validated user input at load).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/hybrid_batch.h"
#include "common/kv_view.h"
#include "common/status.h"
#include "common/tensor_view.h"

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
  all_tokens,         // every token of the step (tests, prompt logprobs)
};

// The rotary embedding's inverse frequencies, [head_dim / 2] fp32 in
// backend memory (see kernels/rope/rope.h for how they are computed).
struct StepArrays;

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

  // ---- memory (start-up only; nothing on the step path allocates) ----
  virtual Result<std::unique_ptr<BackendBuffer>> allocate(std::size_t bytes) = 0;
  // Copies `numel` host elements of `src_dtype` to `dst` (backend memory),
  // converting to `dst_dtype`.
  virtual Status upload(const void* src, DType src_dtype, std::int64_t numel, void* dst,
                        DType dst_dtype) = 0;
  // Copies backend memory to the host (synchronizes).
  virtual Status download(const void* src, std::size_t bytes, void* dst) = 0;
  virtual Status synchronize() = 0;

  // ---- per step ----
  // Sizes the metadata buffers once for the largest step.
  virtual Status reserve_step(int max_tokens, int max_sequences) = 0;
  // Copies the step's validated arrays (step_metadata.h) into backend memory
  // and points `out` at them.
  virtual Status prepare_step(const StepArrays& arrays, const HybridBatch& batch,
                              StepTensors* out) = 0;

  // ---- ops ----
  // out[t, :] = table[token_ids[t], :]                      table [vocab, hidden]
  virtual void embedding(const TensorView& table, const StepTensors& step,
                         const TensorView& out) = 0;
  // out[t] = x[t] / rms(x[t]) * weight                        x, out [T, hidden]
  virtual void rms_norm(const TensorView& x, const TensorView& weight, float eps,
                        const TensorView& out) = 0;
  // residual[t] += delta[t]; out[t] = rms_norm(residual[t])  all [T, hidden]
  virtual void add_rms_norm(const TensorView& residual, const TensorView& delta,
                            const TensorView& weight, float eps, const TensorView& out) = 0;
  // out[T, N] = x[T, K] * weight[N, K]^T (+ bias[N]); out may be fp32 when
  // the compute dtype is not (logits).
  virtual void linear(const TensorView& x, const TensorView& weight, const TensorView* bias,
                      const TensorView& out) = 0;
  // Per-head RMSNorm in place: x [T, heads, head_dim] (row stride may exceed
  // heads * head_dim), weight [head_dim]. Qwen3's q_norm / k_norm.
  virtual void head_rms_norm(const TensorView& x, const TensorView& weight, float eps) = 0;
  // Rotates q [T, q_heads, D] and k [T, kv_heads, D] in place (rotate-half
  // convention) at step.positions, then writes k and v [T, kv_heads, D] into
  // the cache at (token_slots[t], token_kv_index[t]).
  virtual void rope_kv_append(const TensorView& q, const TensorView& k, const TensorView& v,
                              const RopeTable& rope, const StepTensors& step,
                              const KvLayerView& kv) = 0;
  // Causal attention of every new query over its sequence's cache:
  // q, out [T, q_heads, D]; query i of a sequence sees cache rows
  // [0, cached_len + i].
  virtual void attention(const TensorView& q, const KvLayerView& kv, const StepTensors& step,
                         float scale, const TensorView& out) = 0;
  // out[t, i] = silu(gate_up[t, i]) * gate_up[t, I + i]      gate_up [T, 2I], out [T, I]
  virtual void silu_mul(const TensorView& gate_up, const TensorView& out) = 0;
  // out[r, :] = x[step.logit_rows[r], :]                    out [num_logit_rows, hidden]
  virtual void gather_rows(const TensorView& x, const StepTensors& step, const TensorView& out) = 0;
};

// CPU backend (always available).
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);

}  // namespace vpod::model

namespace vpod::model {

enum class AttentionImpl : std::uint8_t {
  kernels,  // src/kernels/attention prefill + decode (fp16/bf16, head_dim 64/128),
            // the simple kernel for anything they do not cover
  simple,   // always the simple exact kernel (src/model/simple_attention.h)
};

struct CudaBackendOptions {
  DType dtype = DType::bf16;  // activations, weights and KV cache
  int device = 0;
  AttentionImpl attention = AttentionImpl::kernels;
  std::size_t gemm_workspace_bytes = 32u << 20;
};

// The CUDA backend, or why it is unavailable (no GPU, no cuBLASLt).
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options);

}  // namespace vpod::model
