// ServingBackend over the real stack: the model runtime on the CPU or CUDA
// backend, the vAttention KV cache, the engine's scheduler and step loop, and
// the tokenizer with the model's chat template. `vpod serve` builds one from
// its flags.
//
// Assembly (load()):
//   backend (cpu | cuda, --attention serial | simple | pod) -> Model::load
//   -> KV budget (GPU: measured free memory x --gpu-memory-utilization; CPU:
//   --kv-cache-memory or a default) -> the cache: vAttention KvCache over the
//   host or CUDA VMM provider, or the paged baseline (--kv-cache paged) ->
//   ModelRunner, TokenizerDecoderFactory -> Engine (admitting against the store).
// Destruction stops the engine first (unfinished requests end with "abort").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "server/backend.h"

namespace vpod::server {

struct EngineBackendOptions {
  std::filesystem::path model_dir;
  std::string served_model_name;  // "": the --model value as given (vLLM's default)
  std::string device = "auto";    // auto | cuda | cpu
  std::string dtype;              // GPU compute dtype: bf16 | fp16 | fp32; "": the model's
  int max_model_len = 0;          // 0: the model's context length
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  double gpu_memory_utilization = 0.9;
  std::size_t kv_cache_memory_bytes = 0;  // 0: from the GPU budget, or the CPU default
  std::string kv_cache = "vattn";         // vattn | paged
  std::string kv_layout = "all-layers";   // all-layers | per-layer
  // vattn: pre-map the next admitted request's first chunk while steps run
  // (KvCacheConfig::eager_allocation); off for comparison.
  bool kv_eager_allocation = true;
  std::string attention = "serial";  // serial | simple | pod (pod: CUDA only)
  int cpu_threads = 0;               // CPU backend threads; 0: all cores
  std::uint64_t seed = 0;            // seeds requests that bring none
  // Memory all concurrent chat-template renders may use together (each
  // render also has its own limit).
  std::size_t template_memory_bytes = std::size_t{1} << 30;
  // --async-scheduling on|off: the engine's pipelined loop, with the model on
  // an AsyncExecutor worker thread (off: synchronous steps, no worker).
  bool async_scheduling = true;
};

class EngineBackend final : public ServingBackend {
 public:
  // Loads everything and starts the engine loop; a Status naming the step
  // that failed otherwise (bad folder, unsupported mode, out of memory).
  static Result<std::unique_ptr<EngineBackend>> load(const EngineBackendOptions& options);
  ~EngineBackend() override;
  EngineBackend(const EngineBackend&) = delete;
  EngineBackend& operator=(const EngineBackend&) = delete;

  // One line about what was loaded (backend, model, KV budget), for the log.
  const std::string& summary() const;

  const ModelCard& model() const override;
  bool ready() const override { return true; }
  Result<std::vector<std::int32_t>> tokenize(std::string_view text,
                                             bool add_special_tokens) const override;
  Result<std::string> detokenize(std::span<const std::int32_t> token_ids,
                                 bool skip_special_tokens) const override;
  std::string token_bytes(std::int32_t token) const override;
  Result<std::string> apply_chat_template(const nlohmann::ordered_json& messages,
                                          const ChatTemplateOptions& options) const override;
  Result<std::unique_ptr<GenerationStream>> submit(engine::RequestSpec spec,
                                                   std::function<void()> wake) override;
  engine::MetricsSnapshot metrics() const override;

 private:
  struct Stack;
  explicit EngineBackend(std::unique_ptr<Stack> stack);
  std::unique_ptr<Stack> stack_;
};

}  // namespace vpod::server
