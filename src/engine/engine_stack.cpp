// EngineStack: builds backend -> model -> KV store -> runner ->
// engine from StackOptions (see engine_stack.h), and the flag spellings of
// its enums.
#include "engine/engine_stack.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "common/splitmix64.h"
#include "cuda/device_info.h"
#include "engine/async_executor.h"
#include "engine/tensor_parallel_group.h"
#include "engine/tokenizer_decoder.h"
#include "kvcache/cuda_vmm.h"
#include "kvcache/host_vmm.h"
#include "kvcache/paged_kv_cache.h"
#include "kvcache/replicated_kv_store.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/tensor_parallel.h"
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
  // --tensor-parallel-size > 1 instead of backend and model: every rank's
  // backend and shard (model_ is rank 0's).
  std::unique_ptr<TensorParallelGroup> tp_group;
  // The vAttention KvCache (--kv-cache vattn) or the PagedKvCache (paged):
  // what the scheduler admits against and what the runner's view reads.
  std::unique_ptr<kvcache::KvStore> store;
  std::unique_ptr<ModelRunner> runner;    // tensor parallelism: the group runs instead
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

Status validate_distributed(const DistributedOptions& d) {
  if (d.nnodes < 1) return invalid_argument(fmt::format("--nnodes must be >= 1, got {}", d.nnodes));
  if (d.node_rank < 0 || d.node_rank >= d.nnodes) {
    return invalid_argument(
        fmt::format("--node-rank must be in [0, --nnodes = {}), got {}", d.nnodes, d.node_rank));
  }
  if (d.master_port < 1 || d.master_port > 65535) {
    return invalid_argument(
        fmt::format("--master-port must be in [1, 65535], got {}", d.master_port));
  }
  if (d.master_addr.empty()) return invalid_argument("--master-addr must not be empty");
  return {};
}

// One backend and model, or (--tensor-parallel-size > 1) the group of ranks,
// each rank's backend made like the single one on its own device.
Status EngineStack::build_model(const StackOptions& o, const model::ModelConfig& config) {
  Parts& p = *parts_;
  const model::ModelOptions mo{.max_num_tokens = o.max_num_batched_tokens,
                               .max_num_sequences = o.max_num_seqs,
                               .load_format = o.load_format,
                               .dummy_seed = o.seed};
  auto check_paged = [&](const model::Backend& backend) -> Status {
    if (o.kv_cache == KvCacheKind::paged && !backend.supports_paged_kv(config.head_dim)) {
      return unimplemented(fmt::format(
          "--kv-cache paged: the {} backend has no paged attention for head_dim {} in this dtype",
          device_name(device_), config.head_dim));
    }
    return {};
  };
  if (o.tensor_parallel_size == 1) {
    VPOD_RETURN_IF_ERROR(build_backend(o, config));
    // Before the weights load (a minute for an 8B model in fp32), not after.
    VPOD_RETURN_IF_ERROR(check_paged(*p.backend));
    VPOD_ASSIGN_OR_RETURN(p.model, model::Model::load(o.model_dir, *p.backend, mo));
    model_ = p.model.get();
    return {};
  }
  if (o.attention == AttentionChoice::pod && device_ == Device::cpu) {
    return unimplemented(
        "--attention pod needs the CUDA backend (the CPU backend has one exact attention)");
  }
  const int n = o.tensor_parallel_size;
  TensorParallelGroupOptions to;
  to.size = n;
  to.device = device_;
  to.model_dir = o.model_dir;
  to.model = mo;
  const Device device = device_;
  const int cpu_threads = o.cpu_threads > 0 ? std::max(1, o.cpu_threads / n) : 0;
  to.make_backend = [&o, &config, device, cpu_threads,
                     n](int rank) -> Result<std::unique_ptr<model::Backend>> {
    if (device == Device::cuda) {
      model::CudaBackendOptions options;
      options.dtype = o.dtype.value_or(config.dtype);
      options.device = rank;
      apply_attention_choice(o.attention, options);
      return model::make_cuda_backend(options);
    }
    // The cores shared between the ranks.
    const int threads =
        cpu_threads > 0 ? cpu_threads
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / n);
    return model::make_cpu_backend(threads);
  };
  VPOD_ASSIGN_OR_RETURN(p.tp_group, TensorParallelGroup::create(to));
  model_ = &p.tp_group->model(0);
  return check_paged(model_->backend());
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
  // Under tensor parallelism each rank's cache holds its own KV heads.
  const model::ModelConfig& mc = model_->shard_config();
  return {.num_layers = mc.num_layers,
          .num_kv_heads = mc.num_kv_heads,
          .head_dim = mc.head_dim,
          .dtype = model_->kv_dtype()};
}

// One KV store on `device_ordinal` (the calling thread's current device on
// CUDA): the paged baseline or the vAttention cache.
Result<std::unique_ptr<kvcache::KvStore>> EngineStack::make_kv_store(const StackOptions& o,
                                                                     int max_model_len,
                                                                     int device_ordinal,
                                                                     std::string* note) {
  const kvcache::KvShape shape = kv_shape();
  VPOD_ASSIGN_OR_RETURN(const std::uint64_t salt, model_prefix_salt(o.model_dir, shape.dtype));
  if (o.kv_cache == KvCacheKind::paged) {
    const int block_size = o.block_size.value_or(kDefaultPagedBlockTokens);
    VPOD_ASSIGN_OR_RETURN(auto paged,
                          kvcache::PagedKvCache::create({.shape = shape,
                                                         .block_size = block_size,
                                                         .max_slots = o.max_num_seqs,
                                                         .max_ctx = max_model_len,
                                                         .memory_bytes = kv_bytes_,
                                                         .device = device_,
                                                         .prefix_caching = o.prefix_caching,
                                                         .prefix_salt = salt}));
    *note = fmt::format("paged, {}-token blocks, {} tokens, attention by {}", block_size,
                        paged->capacity_tokens(), model_->backend().paged_attention_description());
    return std::unique_ptr<kvcache::KvStore>(std::move(paged));
  }
  std::shared_ptr<kvcache::VmmProvider> provider;
  if (device_ == Device::cuda) {
    VPOD_ASSIGN_OR_RETURN(auto cuda_provider, kvcache::CudaVmmProvider::create(device_ordinal));
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
  return std::unique_ptr<kvcache::KvStore>(std::move(cache));
}

// The KV store and the runner that hands the model the store's view: every
// piece whose constructor couples the engine to the KV cache is built here and
// nowhere else. The model runner waits on the host for each step's sampled
// tokens, so the step's kernels are done before the engine releases a slot: no
// stream to fence on. Tensor parallelism: one store per rank, made on the
// rank's thread (its GPU), admitted against as one.
Status EngineStack::build_kv_and_runner(const StackOptions& o, int max_model_len,
                                        std::string* note) {
  Parts& p = *parts_;
  if (p.tp_group) {
    const int n = p.tp_group->size();
    std::vector<std::unique_ptr<kvcache::KvStore>> stores(n);
    std::vector<std::string> notes(n);
    VPOD_RETURN_IF_ERROR(p.tp_group->threads().run_all([&](int r) -> Status {
      VPOD_ASSIGN_OR_RETURN(stores[r], make_kv_store(o, max_model_len, r, &notes[r]));
      return {};
    }));
    VPOD_ASSIGN_OR_RETURN(auto replicated, kvcache::ReplicatedKvStore::create(std::move(stores)));
    p.tp_group->attach_kv(*replicated);
    *note = fmt::format("{} per rank, {} ranks", notes[0], n);
    p.store = std::move(replicated);
    return {};
  }
  VPOD_ASSIGN_OR_RETURN(p.store, make_kv_store(o, max_model_len, 0, note));
  p.runner = std::make_unique<ModelRunner>(*p.model, p.store->view());
  if (!o.defer_late_masks) p.runner->set_defer_unready_masks(false);
  return {};
}

Result<std::unique_ptr<EngineStack>> EngineStack::build(const StackOptions& o) {
  if (o.max_num_seqs < 1 || o.max_num_batched_tokens < 1) {
    return invalid_argument("--max-num-seqs and --max-num-batched-tokens must be >= 1");
  }
  if (o.block_size) {
    if (o.kv_cache != KvCacheKind::paged) {
      return invalid_argument(
          "--block-size applies to --kv-cache paged: vAttention's KV cache is contiguous per "
          "request and has no blocks");
    }
    if (*o.block_size != 1 && *o.block_size != 16 && *o.block_size != 32 && *o.block_size != 64) {
      return invalid_argument(
          fmt::format("--block-size must be 1, 16, 32 or 64, got {}", *o.block_size));
    }
  }
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }
  if (o.tensor_parallel_size < 1) {
    return invalid_argument(
        fmt::format("--tensor-parallel-size must be >= 1, got {}", o.tensor_parallel_size));
  }
  VPOD_RETURN_IF_ERROR(validate_distributed(o.distributed));
  if (o.distributed.nnodes > 1) {
    // The flags, NCCL's id exchange (engine/nccl_id_exchange.h) and the
    // group's ranks take a node's place in a larger group, but an engine on
    // another node needs each step's batch from node 0's scheduler, which
    // nothing sends over the network yet.
    return unimplemented(fmt::format(
        "--nnodes {}: tensor parallelism across hosts is not implemented beyond the NCCL id "
        "exchange (the step metadata broadcast to other nodes is missing); use one node",
        o.distributed.nnodes));
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

  // A size the model does not divide is refused before anything loads.
  VPOD_RETURN_IF_ERROR(model::shard_layout(config, o.tensor_parallel_size, 0).status());
  s->tensor_parallel_size_ = o.tensor_parallel_size;
  VPOD_RETURN_IF_ERROR(s->build_model(o, config));
  const model::ModelConfig& mc = s->model_->config();

  // The KV budget.
  s->kv_bytes_ = o.kv_cache_memory_bytes;
  std::string budget_note;
  if (s->kv_bytes_ == 0) {
    VPOD_ASSIGN_OR_RETURN(s->kv_bytes_, s->default_kv_budget(o, max_model_len, &budget_note));
  }
  std::string cache_note;
  VPOD_RETURN_IF_ERROR(s->build_kv_and_runner(o, max_model_len, &cache_note));
  if (o.logits_observer) {
    if (p.tp_group) {
      p.tp_group->set_logits_observer(o.logits_observer);
    } else {
      p.runner->set_logits_observer(o.logits_observer);
    }
  }
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
  const model::GenerationConfig& gen = s->model_->generation_config();
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
  ModelExecutor* executor = p.tp_group ? static_cast<ModelExecutor*>(p.tp_group.get())
                                       : static_cast<ModelExecutor*>(p.runner.get());
  if (o.async_scheduling) {
    p.worker = std::make_unique<AsyncExecutor>(*executor);
    executor = p.worker.get();
  }
  VPOD_ASSIGN_OR_RETURN(s->engine_, Engine::create(ec, *executor, *p.store, *p.decoders));
  s->engine_->start();

  s->summary_ = fmt::format(
      "{} ({}{}); {} layers, {} of weights; KV cache {} ({}, {} slots x {} tokens, prefix "
      "caching {}){}{}",
      device_name(s->device_), s->model_->backend().description(),
      o.tensor_parallel_size > 1
          ? fmt::format(", tensor parallel x{} over {}", o.tensor_parallel_size,
                        p.tp_group->communicator(0).description())
          : "",
      mc.num_layers,
      format_gib(s->model_->weight_bytes() * static_cast<std::size_t>(o.tensor_parallel_size)),
      format_gib(s->kv_bytes_), cache_note, o.max_num_seqs, max_model_len,
      o.prefix_caching ? "on" : "off", budget_note.empty() ? "" : "; ", budget_note);
  return s;
}

}  // namespace vpod::engine
