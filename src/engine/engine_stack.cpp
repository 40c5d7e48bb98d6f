// EngineStack: builds backend -> model -> KV store -> runner ->
// engine from StackOptions (see engine_stack.h), and the flag spellings of
// its enums.
#include "engine/engine_stack.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <vector>

#include "common/splitmix64.h"
#include "cuda/device_info.h"
#include "engine/async_executor.h"
#include "engine/tokenizer_decoder.h"
#include "kvcache/cuda_vmm.h"
#include "kvcache/host_vmm.h"
#include "kvcache/paged_kv_cache.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace vpod::engine {
namespace {

// Host pages for the CPU backend's KV cache: small models have tiny tokens
// (the tiny preset: 512 B), so 2 MiB pages would hold thousands of tokens
// each and every short request would pin megabytes.
constexpr std::size_t kHostKvPageBytes = std::size_t{64} << 10;
// CPU default KV budget: room for every sequence at this many tokens, at
// least one request of --max-model-len, at most kCpuKvMaxBytes.
constexpr std::int64_t kCpuKvTokensPerSeq = 2048;
constexpr std::size_t kCpuKvMaxBytes = std::size_t{8} << 30;
// The paged baseline's block size (vLLM's default).
constexpr int kPagedBlockTokens = 16;
// How far the background mapper maps ahead of each step's needs.
constexpr std::int64_t kKvLookaheadTokens = 16;

std::string format_gib(std::size_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(1ull << 30));
}

// Without a tokenizer (StackOptions::load_tokenizer = false) streams carry
// token ids only.
class NoTextDecoder final : public IncrementalDecoder {
 public:
  void append(std::int32_t, std::string&) override {}
  void finish(std::string&) override {}
};

class NoTextDecoderFactory final : public DecoderFactory {
 public:
  std::unique_ptr<IncrementalDecoder> create(std::span<const std::int32_t>, bool) const override {
    return std::make_unique<NoTextDecoder>();
  }
};

}  // namespace

std::string_view device_request_name(DeviceRequest d) {
  switch (d) {
    case DeviceRequest::automatic: return "auto";
    case DeviceRequest::cuda: return "cuda";
    case DeviceRequest::cpu: return "cpu";
  }
  return "?";
}

std::string_view kv_cache_kind_name(KvCacheKind k) {
  return k == KvCacheKind::vattn ? "vattn" : "paged";
}

std::string_view attention_choice_name(AttentionChoice a) {
  switch (a) {
    case AttentionChoice::serial: return "serial";
    case AttentionChoice::simple: return "simple";
    case AttentionChoice::pod: return "pod";
  }
  return "?";
}

Result<DeviceRequest> parse_device_request(std::string_view text) {
  for (DeviceRequest d : {DeviceRequest::automatic, DeviceRequest::cuda, DeviceRequest::cpu})
    if (text == device_request_name(d)) return d;
  return invalid_argument(fmt::format("must be auto, cuda or cpu, got '{}'", text));
}

Result<KvCacheKind> parse_kv_cache_kind(std::string_view text) {
  for (KvCacheKind k : {KvCacheKind::vattn, KvCacheKind::paged})
    if (text == kv_cache_kind_name(k)) return k;
  return invalid_argument(fmt::format("must be vattn or paged, got '{}'", text));
}

Result<AttentionChoice> parse_attention_choice(std::string_view text) {
  for (AttentionChoice a : {AttentionChoice::serial, AttentionChoice::simple, AttentionChoice::pod})
    if (text == attention_choice_name(a)) return a;
  return invalid_argument(fmt::format("must be serial, simple or pod, got '{}'", text));
}

void apply_attention_choice(AttentionChoice choice, model::CudaBackendOptions& options) {
  options.attention = choice == AttentionChoice::simple ? model::AttentionImpl::simple
                                                        : model::AttentionImpl::kernels;
  options.attention_mode =
      choice == AttentionChoice::pod ? model::AttentionMode::pod : model::AttentionMode::serial;
}

Result<std::uint64_t> model_prefix_salt(const std::filesystem::path& model_dir, DType kv_dtype) {
  const std::filesystem::path path = model_dir / "config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot read {}", path.string()));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return splitmix64_bytes(dtype_name(kv_dtype), splitmix64_bytes(bytes));
}

// Members in construction order: destruction runs bottom-up, so the runner,
// the cache and the model go away after the engine that borrows them (the
// engine itself is EngineStack::engine_, destroyed before this).
struct EngineStack::Parts {
  std::unique_ptr<model::Backend> backend;
  std::unique_ptr<model::Model> model;
  // The vAttention KvCache (--kv-cache vattn) or the PagedKvCache (paged):
  // what the scheduler admits against and what the runner's view reads.
  std::unique_ptr<kvcache::KvStore> store;
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<AsyncExecutor> worker;  // --async-scheduling on
  std::unique_ptr<DecoderFactory> decoders;
};

EngineStack::EngineStack() : parts_(std::make_unique<Parts>()) {}

EngineStack::~EngineStack() {
  if (engine_) engine_->stop();
}

// The backend for --device and --attention. The CPU backend runs one exact
// attention for every batch: there is no fused kernel to choose.
Status EngineStack::build_backend(const StackOptions& o, const model::ModelConfig& config) {
  if (device_ == Device::cuda) {
    model::CudaBackendOptions options;
    options.dtype = o.dtype.value_or(config.dtype);
    apply_attention_choice(o.attention, options);
    VPOD_ASSIGN_OR_RETURN(parts_->backend, model::make_cuda_backend(options));
    return {};
  }
  if (o.attention == AttentionChoice::pod) {
    return unimplemented(
        "--attention pod needs the CUDA backend (the CPU backend has one exact attention)");
  }
  parts_->backend = model::make_cpu_backend(o.cpu_threads);
  return {};
}

// The KV budget when --kv-cache-memory is not given. GPU: what is left of
// --gpu-memory-utilization once the model is loaded (measured; `note` says
// how it was planned). CPU: room for every sequence at kCpuKvTokensPerSeq
// tokens, capped, but at least one request of max_model_len.
Result<std::size_t> EngineStack::default_kv_budget(const StackOptions& o, int max_model_len,
                                                   std::string* note) const {
  const std::size_t token_bytes = kv_shape().bytes_per_token();
  if (device_ == Device::cuda) {
    VPOD_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
    if (gpus.empty()) return unavailable("no GPU found after loading the model");
    VPOD_ASSIGN_OR_RETURN(
        const model::GpuMemoryPlan plan,
        model::plan_gpu_memory(gpus[0].total_memory_bytes, gpus[0].free_memory_bytes,
                               o.gpu_memory_utilization, model_->weight_bytes(),
                               model_->activation_bytes(), token_bytes));
    *note = plan.to_string();
    return plan.kv_bytes;
  }
  const std::int64_t tokens = std::max<std::int64_t>(
      max_model_len, static_cast<std::int64_t>(o.max_num_seqs) * kCpuKvTokensPerSeq);
  const std::size_t kv_bytes =
      std::min(kCpuKvMaxBytes, static_cast<std::size_t>(tokens) * token_bytes);
  return std::max(kv_bytes, static_cast<std::size_t>(max_model_len) * token_bytes);
}

kvcache::KvShape EngineStack::kv_shape() const {
  const model::ModelConfig& mc = model_->config();
  return {.num_layers = mc.num_layers,
          .num_kv_heads = mc.num_kv_heads,
          .head_dim = mc.head_dim,
          .dtype = model_->kv_dtype()};
}

// The KV store and the runner that hands the model the store's view: every
// piece whose constructor couples the engine to the KV cache is built here and
// nowhere else. The model runner waits on the host for each step's sampled
// tokens, so the step's kernels are done before the engine releases a slot: no
// stream to fence on.
Status EngineStack::build_kv_and_runner(const StackOptions& o, int max_model_len,
                                        std::string* note) {
  Parts& p = *parts_;
  const kvcache::KvShape shape = kv_shape();
  VPOD_ASSIGN_OR_RETURN(const std::uint64_t salt, model_prefix_salt(o.model_dir, shape.dtype));
  if (o.kv_cache == KvCacheKind::paged) {
    VPOD_ASSIGN_OR_RETURN(auto paged,
                          kvcache::PagedKvCache::create({.shape = shape,
                                                         .block_size = kPagedBlockTokens,
                                                         .max_slots = o.max_num_seqs,
                                                         .max_ctx = max_model_len,
                                                         .memory_bytes = kv_bytes_,
                                                         .device = device_,
                                                         .prefix_caching = o.prefix_caching,
                                                         .prefix_salt = salt}));
    *note = fmt::format("paged, {}-token blocks, {} tokens", kPagedBlockTokens,
                        paged->capacity_tokens());
    p.store = std::move(paged);
    p.runner = std::make_unique<ModelRunner>(*p.model, p.store->view());
    return {};
  }
  std::shared_ptr<kvcache::VmmProvider> provider;
  if (device_ == Device::cuda) {
    VPOD_ASSIGN_OR_RETURN(auto cuda_provider, kvcache::CudaVmmProvider::create(0));
    provider = std::move(cuda_provider);
  } else {
    VPOD_ASSIGN_OR_RETURN(auto host_provider, kvcache::HostVmmProvider::create(kHostKvPageBytes));
    provider = std::move(host_provider);
  }
  VPOD_ASSIGN_OR_RETURN(auto cache,
                        kvcache::KvCache::create({.shape = shape,
                                                  .layout = o.kv_layout,
                                                  .max_slots = o.max_num_seqs,
                                                  .max_ctx = max_model_len,
                                                  .memory_bytes = kv_bytes_,
                                                  .growth = kvcache::GrowthMode::background,
                                                  .lookahead_tokens = kKvLookaheadTokens,
                                                  .eager_allocation = o.kv_eager_allocation,
                                                  .prefix_caching = o.prefix_caching,
                                                  .prefix_salt = salt},
                                                 provider));
  *note = fmt::format("vattn {}, {} tokens", kvcache::kv_layout_name(o.kv_layout),
                      cache->capacity_tokens());
  p.store = std::move(cache);
  p.runner = std::make_unique<ModelRunner>(*p.model, p.store->view());
  return {};
}

Result<std::unique_ptr<EngineStack>> EngineStack::build(const StackOptions& o) {
  if (o.max_num_seqs < 1 || o.max_num_batched_tokens < 1) {
    return invalid_argument("--max-num-seqs and --max-num-batched-tokens must be >= 1");
  }
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }
  std::unique_ptr<EngineStack> s(new EngineStack());
  Parts& p = *s->parts_;
  VPOD_ASSIGN_OR_RETURN(const cuda::BackendChoice choice,
                        cuda::choose_backend(device_request_name(o.device)));
  s->device_ = choice.device;
  VPOD_ASSIGN_OR_RETURN(const model::ModelConfig config, model::load_model_config(o.model_dir));
  const int max_model_len = o.max_model_len > 0 ? o.max_model_len : config.max_model_len();
  if (max_model_len > config.max_model_len()) {
    return invalid_argument(fmt::format("--max-model-len {} exceeds the model's context of {}",
                                        max_model_len, config.max_model_len()));
  }
  if (o.load_tokenizer) {
    s->tokenizer_ = o.tokenizer;
    if (!s->tokenizer_) {
      VPOD_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(o.model_dir));
      s->tokenizer_ = std::make_shared<const tokenizer::Tokenizer>(std::move(tok));
    }
  }

  VPOD_RETURN_IF_ERROR(s->build_backend(o, config));
  // Before the weights load (a minute for an 8B model in fp32), not after.
  if (o.kv_cache == KvCacheKind::paged && !p.backend->supports_paged_kv(config.head_dim)) {
    return unimplemented(fmt::format(
        "--kv-cache paged: the {} backend has no paged attention for head_dim {} in this dtype",
        device_name(s->device_), config.head_dim));
  }
  VPOD_ASSIGN_OR_RETURN(p.model, model::Model::load(o.model_dir, *p.backend,
                                                    {.max_num_tokens = o.max_num_batched_tokens,
                                                     .max_num_sequences = o.max_num_seqs}));
  s->model_ = p.model.get();
  const model::ModelConfig& mc = p.model->config();

  // The KV budget.
  s->kv_bytes_ = o.kv_cache_memory_bytes;
  std::string budget_note;
  if (s->kv_bytes_ == 0) {
    VPOD_ASSIGN_OR_RETURN(s->kv_bytes_, s->default_kv_budget(o, max_model_len, &budget_note));
  }
  std::string cache_note;
  VPOD_RETURN_IF_ERROR(s->build_kv_and_runner(o, max_model_len, &cache_note));
  if (o.logits_observer) p.runner->set_logits_observer(o.logits_observer);
  if (s->tokenizer_) {
    p.decoders = std::make_unique<TokenizerDecoderFactory>(*s->tokenizer_);
  } else {
    p.decoders = std::make_unique<NoTextDecoderFactory>();
  }

  EngineConfig ec;
  ec.scheduler = {.max_num_seqs = o.max_num_seqs,
                  .max_num_batched_tokens = o.max_num_batched_tokens,
                  .prefix_caching = o.prefix_caching};
  ec.max_model_len = max_model_len;
  ec.vocab_size = mc.vocab_size;
  const model::GenerationConfig& gen = p.model->generation_config();
  for (int id : gen.eos_token_ids.empty() ? mc.eos_token_ids : gen.eos_token_ids) {
    ec.eos_token_ids.push_back(id);
  }
  ec.seed = o.seed;
  // Structured output: the vocabulary is built at the first constrained request.
  if (s->tokenizer_) {
    ec.grammar = std::make_shared<grammar::GrammarCompiler>(
        grammar::VocabularySource{.tokenizer = s->tokenizer_,
                                  .tokenizer_json = o.model_dir / "tokenizer.json",
                                  .vocab_size = mc.vocab_size,
                                  .stop_token_ids = ec.eos_token_ids});
  }
  // Pipelined: the worker thread issues each step (and waits for its sampled
  // tokens) while the engine thread streams the previous step's outputs. The
  // worker uses the CUDA runtime's default device 0, as the KV cache does.
  ec.async_scheduling = o.async_scheduling;
  ModelExecutor* executor = p.runner.get();
  if (o.async_scheduling) {
    p.worker = std::make_unique<AsyncExecutor>(*p.runner);
    executor = p.worker.get();
  }
  VPOD_ASSIGN_OR_RETURN(s->engine_, Engine::create(ec, *executor, *p.store, *p.decoders));
  s->engine_->start();

  s->summary_ = fmt::format(
      "{} ({}); {} layers, {} of weights; KV cache {} ({}, {} slots x {} tokens, prefix caching "
      "{}){}{}",
      device_name(s->device_), p.backend->description(), mc.num_layers,
      format_gib(p.model->weight_bytes()), format_gib(s->kv_bytes_), cache_note, o.max_num_seqs,
      max_model_len, o.prefix_caching ? "on" : "off", budget_note.empty() ? "" : "; ", budget_note);
  return s;
}

}  // namespace vpod::engine
