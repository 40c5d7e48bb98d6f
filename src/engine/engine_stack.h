// The composition root: one typed options struct, parsed once by the CLI,
// builds the whole serving stack - backend, model, KV store (its own
// capacity ledger), model runner (+ the AsyncExecutor worker), engine, tokenizer and
// detokenizer factory. `vpod serve` (through server::EngineBackend),
// `vpod generate` and `vpod bench offline` all run on an EngineStack.
//
//   EngineStack::build(options):
//     backend (cpu | cuda; --attention) -> Model::load -> KV budget (GPU:
//     measured free memory x --gpu-memory-utilization; CPU: --kv-cache-memory
//     or a default) -> KV store (vAttention over host or CUDA VMM, or the
//     paged baseline, which the scheduler admits against) + ModelRunner over
//     the store's view -> Engine (started).
//
// With --tensor-parallel-size N > 1 the model is a TensorParallelGroup (one
// thread, backend, shard and KV cache per rank; tensor_parallel_group.h) and
// the scheduler admits against the ranks' stores as one
// (kvcache::ReplicatedKvStore).
//
// Destruction stops the engine first (unfinished requests end with "abort"),
// then releases what it borrowed, in reverse order of construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "kvcache/kv_cache.h"

namespace vpod::tokenizer {
class Tokenizer;
}

namespace vpod::engine {

// --device: where the model runs. automatic: CUDA when a usable GPU is found.
enum class DeviceRequest : std::uint8_t { automatic, cuda, cpu };
// --kv-cache: the vAttention cache, or the paged baseline (16-token blocks).
enum class KvCacheKind : std::uint8_t { vattn, paged };
// The paged baseline's block without --block-size (vLLM's default).
inline constexpr int kDefaultPagedBlockTokens = 16;
// --attention: serial (prefill then decode kernels), simple (serial through
// the simple exact kernel), pod (the fused kernel on hybrid steps; CUDA only).
enum class AttentionChoice : std::uint8_t { serial, simple, pod };

std::string_view device_request_name(DeviceRequest d);      // "auto" | "cuda" | "cpu"
std::string_view kv_cache_kind_name(KvCacheKind k);         // "vattn" | "paged"
std::string_view attention_choice_name(AttentionChoice a);  // "serial" | "simple" | "pod"
// The flags' spellings; anything else is invalid_argument naming the value.
Result<DeviceRequest> parse_device_request(std::string_view text);
Result<KvCacheKind> parse_kv_cache_kind(std::string_view text);
Result<AttentionChoice> parse_attention_choice(std::string_view text);
// What an --attention choice means to the CUDA backend (AttentionImpl and
// AttentionMode); the benchmarks that build a backend by hand use it too.
void apply_attention_choice(AttentionChoice choice, model::CudaBackendOptions& options);

// The salt the KV stores' prefix index starts from: the model folder's
// config.json bytes and the KV dtype, so K/V of one model or precision are
// never handed to another.
Result<std::uint64_t> model_prefix_salt(const std::filesystem::path& model_dir, DType kv_dtype);

// --nnodes, --node-rank, --master-addr, --master-port: tensor parallelism
// across hosts. Global rank 0 (node 0) makes NCCL's id and serves it over TCP
// at master_addr:master_port (engine/nccl_id_exchange.h).
struct DistributedOptions {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};
// The flags' checks (each error names the flag and the value).
Status validate_distributed(const DistributedOptions& d);

struct StackOptions {
  std::filesystem::path model_dir;
  DeviceRequest device = DeviceRequest::automatic;
  std::optional<DType> dtype;  // GPU compute dtype; unset: the model's
  AttentionChoice attention = AttentionChoice::serial;
  int cpu_threads = 0;  // CPU backend threads (all ranks together); 0: all cores
  // --tensor-parallel-size: ranks (GPUs, or CPU threads) the model is split
  // over, in this process.
  int tensor_parallel_size = 1;
  DistributedOptions distributed;

  int max_model_len = 0;  // prompt + output per request; 0: the model's context length
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;

  KvCacheKind kv_cache = KvCacheKind::vattn;
  // --block-size (vLLM's flag): tokens per block of the paged baseline, 1,
  // 16, 32 or 64 (FlashInfer's page size; default 16). vAttention has no
  // blocks (its prefix blocks are its physical pages), so there it is refused.
  std::optional<int> block_size;
  // --load-format (vLLM's): the folder's safetensors, or dummy: make-model's
  // random weights for --seed, made in memory (model/weight_source.h).
  model::LoadFormat load_format = model::LoadFormat::safetensors;
  kvcache::KvLayout kv_layout = kvcache::KvLayout::all_layers;
  // vattn: pre-map the next admitted request's first chunk while steps run
  // (KvCacheConfig::eager_allocation); off for comparison.
  bool kv_eager_allocation = true;
  // --enable-prefix-caching: both stores keep computed prompt blocks and
  // hand them to later requests that start with the same tokens (on by
  // default, as in vLLM). The stack salts the cache with the model's identity
  // (model_prefix_salt).
  bool prefix_caching = true;
  double gpu_memory_utilization = 0.9;    // (0, 1]
  std::size_t kv_cache_memory_bytes = 0;  // 0: from the GPU budget, or the CPU default

  // The engine's pipelined loop, with the model on an AsyncExecutor worker
  // thread (false: synchronous steps, no worker).
  bool async_scheduling = true;
  // Structured output on the GPU: a decode row whose grammar mask is not
  // ready when the forward is done sits the step out instead of stalling it
  // (docs/structured_output.md). Off: every step waits for every mask.
  bool defer_late_masks = true;
  std::uint64_t seed = 0;  // seeds the requests that bring none

  // false: no tokenizer is loaded (the folder may have none); requests come as
  // ids and their streams carry no text.
  bool load_tokenizer = true;
  // The folder's tokenizer when the caller has loaded it already (used
  // instead of loading it again).
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  LogitsObserver logits_observer;  // optional (ModelRunner::set_logits_observer)
};

class EngineStack {
 public:
  // Loads everything and starts the engine loop; a Status naming the step
  // that failed otherwise (bad option, bad folder, unsupported mode, out of
  // memory).
  static Result<std::unique_ptr<EngineStack>> build(const StackOptions& options);
  ~EngineStack();
  EngineStack(const EngineStack&) = delete;
  EngineStack& operator=(const EngineStack&) = delete;

  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  // The model (tensor parallelism: rank 0's shard; config() is the whole
  // model's).
  const model::Model& model() const { return *model_; }
  int tensor_parallel_size() const { return tensor_parallel_size_; }
  // Null when the options said load_tokenizer = false.
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  Device device() const { return device_; }
  int max_model_len() const { return engine_->max_model_len(); }
  std::size_t kv_cache_bytes() const { return kv_bytes_; }
  // One line about what was loaded (backend, model, KV budget), for the log.
  const std::string& summary() const { return summary_; }

 private:
  EngineStack();
  Status build_backend(const StackOptions& o, const model::ModelConfig& config);
  // Loads the model: one backend and Model, or the tensor-parallel group.
  Status build_model(const StackOptions& o, const model::ModelConfig& config);
  Result<std::unique_ptr<kvcache::KvStore>> make_kv_store(const StackOptions& o, int max_model_len,
                                                          int device_ordinal, std::string* note);
  Result<std::size_t> default_kv_budget(const StackOptions& o, int max_model_len,
                                        std::string* note) const;
  kvcache::KvShape kv_shape() const;
  Status build_kv_and_runner(const StackOptions& o, int max_model_len, std::string* note);

  struct Parts;  // members in construction order (destroyed bottom-up)
  Device device_ = Device::cpu;
  int tensor_parallel_size_ = 1;
  std::size_t kv_bytes_ = 0;
  std::string summary_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Parts> parts_;
  model::Model* model_ = nullptr;  // owned by parts_
  std::unique_ptr<Engine> engine_;
};

}  // namespace vpod::engine
