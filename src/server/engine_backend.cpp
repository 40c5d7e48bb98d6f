#include "server/engine_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "common/log.h"
#include "cuda/device_info.h"
#include "engine/async_executor.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/tokenizer_decoder.h"
#include "kvcache/cuda_vmm.h"
#include "kvcache/host_vmm.h"
#include "kvcache/kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vpod::server {
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

class EngineStream final : public GenerationStream {
 public:
  EngineStream(engine::Engine& engine, std::shared_ptr<engine::RequestStream> stream)
      : engine_(engine), stream_(std::move(stream)) {}
  bool try_pop(engine::RequestOutput& out) override { return stream_->try_pop(out); }
  void abort() override { engine_.abort(stream_->id()); }

 private:
  engine::Engine& engine_;
  std::shared_ptr<engine::RequestStream> stream_;
};

}  // namespace

// Members in construction order: destruction runs bottom-up, so the engine
// stops before the runner, the cache and the model it borrows go away.
struct EngineBackend::Stack {
  ModelCard card;
  std::string summary;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template;
  // Every concurrent chat-template render draws from this one budget.
  std::unique_ptr<tokenizer::jinja::RenderBudget> template_budget;
  std::unique_ptr<model::Backend> backend;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<kvcache::KvCache> cache;             // --kv-cache vattn
  std::unique_ptr<kvcache::PagedKvCache> paged_cache;  // --kv-cache paged
  kvcache::KvStore* store = nullptr;  // the one above: what the scheduler admits against
  std::unique_ptr<engine::ModelRunner> runner;
  std::unique_ptr<engine::AsyncExecutor> worker;  // --async-scheduling on
  std::unique_ptr<engine::TokenizerDecoderFactory> decoders;
  std::unique_ptr<engine::Engine> engine;
};

Result<std::unique_ptr<EngineBackend>> EngineBackend::load(const EngineBackendOptions& o) {
  const bool paged = o.kv_cache == "paged";
  if (!paged && o.kv_cache != "vattn") {
    return invalid_argument("--kv-cache must be vattn or paged, got '" + o.kv_cache + "'");
  }
  VPOD_ASSIGN_OR_RETURN(const kvcache::KvLayout layout, kvcache::parse_kv_layout(o.kv_layout));
  if (o.max_num_seqs < 1 || o.max_num_batched_tokens < 1) {
    return invalid_argument("--max-num-seqs and --max-num-batched-tokens must be >= 1");
  }
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }

  auto s = std::make_unique<Stack>();
  VPOD_ASSIGN_OR_RETURN(const cuda::BackendChoice choice, cuda::choose_backend(o.device));
  VPOD_ASSIGN_OR_RETURN(const model::ModelConfig config, model::load_model_config(o.model_dir));
  const int max_model_len = o.max_model_len > 0 ? o.max_model_len : config.max_model_len();
  if (max_model_len > config.max_model_len()) {
    return invalid_argument(fmt::format("--max-model-len {} exceeds the model's context of {}",
                                        max_model_len, config.max_model_len()));
  }

  {
    VPOD_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(o.model_dir));
    s->tokenizer = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
    VPOD_ASSIGN_OR_RETURN(tokenizer::ChatTemplate tmpl, tokenizer::ChatTemplate::load(o.model_dir));
    s->chat_template = std::make_unique<tokenizer::ChatTemplate>(std::move(tmpl));
    s->template_budget = std::make_unique<tokenizer::jinja::RenderBudget>(o.template_memory_bytes);
  }

  if (choice.device == Device::cuda) {
    model::CudaBackendOptions options;
    VPOD_RETURN_IF_ERROR(model::apply_attention_flag(o.attention, &options));
    options.dtype = config.dtype;
    if (!o.dtype.empty()) {
      VPOD_ASSIGN_OR_RETURN(options.dtype, parse_dtype(o.dtype));
    }
    VPOD_ASSIGN_OR_RETURN(s->backend, model::make_cuda_backend(options));
  } else {
    // The CPU backend runs one exact attention for every batch: there is no
    // fused kernel to choose.
    if (o.attention == "pod") {
      return unimplemented(
          "--attention pod needs the CUDA backend (the CPU backend has one exact attention)");
    }
    if (o.attention != "serial" && o.attention != "simple") {
      return invalid_argument("--attention must be serial, simple or pod, got '" + o.attention +
                              "'");
    }
    s->backend = model::make_cpu_backend(o.cpu_threads);
  }
  VPOD_ASSIGN_OR_RETURN(s->model, model::Model::load(o.model_dir, *s->backend,
                                                     {.max_num_tokens = o.max_num_batched_tokens,
                                                      .max_num_sequences = o.max_num_seqs}));
  const model::ModelConfig& mc = s->model->config();
  const kvcache::KvShape shape{.num_layers = mc.num_layers,
                               .num_kv_heads = mc.num_kv_heads,
                               .head_dim = mc.head_dim,
                               .dtype = s->model->kv_dtype()};
  const std::size_t token_bytes = shape.bytes_per_token();

  if (paged && !s->backend->supports_paged_kv(mc.head_dim)) {
    return unimplemented(
        fmt::format("--kv-cache paged: the {} backend has no paged attention for head_dim {}",
                    device_name(choice.device), mc.head_dim));
  }

  // The KV budget.
  std::size_t kv_bytes = o.kv_cache_memory_bytes;
  std::string budget_note;
  if (choice.device == Device::cuda) {
    if (kv_bytes == 0) {
      VPOD_ASSIGN_OR_RETURN(const std::vector<cuda::GpuInfo> gpus, cuda::query_gpus());
      if (gpus.empty()) return unavailable("no GPU found after loading the model");
      VPOD_ASSIGN_OR_RETURN(
          const model::GpuMemoryPlan plan,
          model::plan_gpu_memory(gpus[0].total_memory_bytes, gpus[0].free_memory_bytes,
                                 o.gpu_memory_utilization, s->model->weight_bytes(),
                                 s->model->activation_bytes(), token_bytes));
      kv_bytes = plan.kv_bytes;
      budget_note = plan.to_string();
    }
  } else if (kv_bytes == 0) {
    const std::int64_t tokens = std::max<std::int64_t>(
        max_model_len, static_cast<std::int64_t>(o.max_num_seqs) * kCpuKvTokensPerSeq);
    kv_bytes = std::min(kCpuKvMaxBytes, static_cast<std::size_t>(tokens) * token_bytes);
    kv_bytes = std::max(kv_bytes, static_cast<std::size_t>(max_model_len) * token_bytes);
  }

  // The cache (also what the scheduler admits against), and the runner that
  // hands the model its views. The model runner waits on the host for each
  // step's sampled tokens, so the step's kernels are done before the engine
  // releases a slot: no stream to fence on.
  std::string cache_note;
  if (paged) {
    VPOD_ASSIGN_OR_RETURN(s->paged_cache,
                          kvcache::PagedKvCache::create({.shape = shape,
                                                         .block_size = kPagedBlockTokens,
                                                         .max_slots = o.max_num_seqs,
                                                         .max_ctx = max_model_len,
                                                         .memory_bytes = kv_bytes,
                                                         .device = choice.device}));
    s->store = s->paged_cache.get();
    cache_note = fmt::format("paged, {}-token blocks, {} tokens", kPagedBlockTokens,
                             s->paged_cache->capacity_tokens());
  } else {
    std::shared_ptr<kvcache::VmmProvider> provider;
    if (choice.device == Device::cuda) {
      VPOD_ASSIGN_OR_RETURN(auto cuda_provider, kvcache::CudaVmmProvider::create(0));
      provider = std::move(cuda_provider);
    } else {
      VPOD_ASSIGN_OR_RETURN(auto host_provider, kvcache::HostVmmProvider::create(kHostKvPageBytes));
      provider = std::move(host_provider);
    }
    VPOD_ASSIGN_OR_RETURN(s->cache,
                          kvcache::KvCache::create({.shape = shape,
                                                    .layout = layout,
                                                    .max_slots = o.max_num_seqs,
                                                    .max_ctx = max_model_len,
                                                    .memory_bytes = kv_bytes,
                                                    .growth = kvcache::GrowthMode::background,
                                                    .lookahead_tokens = kKvLookaheadTokens,
                                                    .eager_allocation = o.kv_eager_allocation},
                                                   provider));
    s->store = s->cache.get();
    cache_note = fmt::format("vattn {}, {} tokens", kvcache::kv_layout_name(layout),
                             s->cache->capacity_tokens());
  }
  s->runner = std::make_unique<engine::ModelRunner>(*s->model, s->store->view());
  s->decoders = std::make_unique<engine::TokenizerDecoderFactory>(*s->tokenizer);

  engine::EngineConfig ec;
  ec.scheduler = {.max_num_seqs = o.max_num_seqs,
                  .max_num_batched_tokens = o.max_num_batched_tokens};
  ec.max_model_len = max_model_len;
  ec.vocab_size = mc.vocab_size;
  const model::GenerationConfig& gen = s->model->generation_config();
  for (int id : gen.eos_token_ids.empty() ? mc.eos_token_ids : gen.eos_token_ids) {
    ec.eos_token_ids.push_back(id);
  }
  ec.seed = o.seed;
  // Pipelined: the worker thread issues each step (and waits for its sampled
  // tokens) while the engine thread streams the previous step's outputs. The
  // worker uses the CUDA runtime's default device 0, as the KV cache does.
  ec.async_scheduling = o.async_scheduling;
  engine::ModelExecutor* executor = s->runner.get();
  if (o.async_scheduling) {
    s->worker = std::make_unique<engine::AsyncExecutor>(*s->runner);
    executor = s->worker.get();
  }
  VPOD_ASSIGN_OR_RETURN(s->engine, engine::Engine::create(ec, *executor, *s->store, *s->decoders));
  s->engine->start();

  s->card.id = o.served_model_name.empty() ? o.model_dir.string() : o.served_model_name;
  s->card.root = o.model_dir.string();
  s->card.created = static_cast<std::int64_t>(std::time(nullptr));
  s->card.max_model_len = max_model_len;
  s->card.vocab_size = mc.vocab_size;
  s->summary =
      fmt::format("{} ({}); {} layers, {} of weights; KV cache {} ({}, {} slots x {} tokens){}{}",
                  device_name(choice.device), s->backend->description(), mc.num_layers,
                  format_gib(s->model->weight_bytes()), format_gib(kv_bytes), cache_note,
                  o.max_num_seqs, max_model_len, budget_note.empty() ? "" : "; ", budget_note);
  return std::unique_ptr<EngineBackend>(new EngineBackend(std::move(s)));
}

EngineBackend::EngineBackend(std::unique_ptr<Stack> stack) : stack_(std::move(stack)) {}

EngineBackend::~EngineBackend() {
  if (stack_ && stack_->engine) stack_->engine->stop();
}

const std::string& EngineBackend::summary() const { return stack_->summary; }
const ModelCard& EngineBackend::model() const { return stack_->card; }

Result<std::vector<std::int32_t>> EngineBackend::tokenize(std::string_view text,
                                                          bool add_special_tokens) const {
  return stack_->tokenizer->encode(text, add_special_tokens);
}

Result<std::string> EngineBackend::detokenize(std::span<const std::int32_t> token_ids,
                                              bool skip_special_tokens) const {
  return stack_->tokenizer->decode(token_ids, skip_special_tokens);
}

// The token decoded alone, as vLLM reports logprob tokens: a piece of a
// multi-byte character comes out as U+FFFD.
std::string EngineBackend::token_bytes(std::int32_t token) const {
  const std::int32_t ids[] = {token};
  auto text = stack_->tokenizer->decode(ids, /*skip_special_tokens=*/false);
  return text.ok() ? std::move(text).value() : std::string();
}

Result<std::string> EngineBackend::apply_chat_template(const nlohmann::ordered_json& messages,
                                                       const ChatTemplateOptions& options) const {
  tokenizer::ChatRenderOptions render;
  render.extra_vars = options.extra_vars;
  render.continue_final_message = options.continue_final_message;
  render.limits.shared_budget = stack_->template_budget.get();
  return stack_->chat_template->render(messages, options.add_generation_prompt, render);
}

Result<std::unique_ptr<GenerationStream>> EngineBackend::submit(engine::RequestSpec spec,
                                                                std::function<void()> wake) {
  VPOD_ASSIGN_OR_RETURN(auto stream, stack_->engine->submit(std::move(spec), std::move(wake)));
  return std::unique_ptr<GenerationStream>(new EngineStream(*stack_->engine, std::move(stream)));
}

engine::MetricsSnapshot EngineBackend::metrics() const { return stack_->engine->metrics(); }

}  // namespace vpod::server
