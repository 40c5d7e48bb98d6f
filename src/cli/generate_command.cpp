// `vpod generate`: one-shot generation streamed to the terminal. With
// --prompt-ids it takes token ids instead of text and prints the ids it
// generated as JSON (the transformers comparison, tools/model/compare_hf.py,
// drives it that way); --dump-logits writes every step's fp32 logits.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cuda/device_info.h"
#include "kernels/sampling/sampling.h"
#include "model/model.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace vpod::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, device = "auto", dtype, attention = "serial", dump_logits;
  std::vector<std::string> prompt_ids;  // one generation per entry
  int max_tokens = 64;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::uint64_t seed = 0;
  bool ignore_eos = false;
};

[[noreturn]] void fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "vpod generate: %s\n", message.c_str());
  throw CLI::RuntimeError(code);
}

template <typename T>
T value_or_fail(Result<T> r) {
  if (!r.ok()) fail(r.status().to_string());
  return std::move(r).value();
}

std::vector<std::int32_t> parse_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<std::int32_t>(v));
    } catch (const std::exception&) {
      fail("--prompt-ids: '" + item + "' is not a token id", 2);
    }
  }
  return ids;
}

void run(const GenerateArgs& a) {
  if (a.prompt.empty() == a.prompt_ids.empty())
    fail("give exactly one of --prompt, --prompt-ids", 2);
  if (a.max_tokens < 1) fail("--max-tokens must be >= 1", 2);
  const auto choice = value_or_fail(cuda::choose_backend(a.device));
  std::fprintf(stderr, "backend: %s (%s)\n", device_name(choice.device), choice.reason.c_str());
  const model::ModelConfig config = value_or_fail(model::load_model_config(a.model));

  std::unique_ptr<model::Backend> backend;
  if (choice.device == Device::cuda) {
    model::CudaBackendOptions options;
    options.dtype = a.dtype.empty() ? (config.dtype == DType::f32 ? DType::f32 : config.dtype)
                                    : value_or_fail(parse_dtype(a.dtype));
    if (Status s = model::apply_attention_flag(a.attention, &options); !s.ok()) {
      fail("--attention: " + s.to_string(), 2);
    }
    backend = value_or_fail(model::make_cuda_backend(options));
  } else {
    backend = model::make_cpu_backend();
  }

  std::optional<tokenizer::Tokenizer> tok;
  std::vector<std::vector<std::int32_t>> prompts;
  if (!a.prompt.empty()) {
    tok = value_or_fail(tokenizer::Tokenizer::from_file(a.model));
    prompts.emplace_back();
    for (auto id : value_or_fail(tok->encode(a.prompt, /*add_special_tokens=*/true))) {
      prompts.back().push_back(static_cast<std::int32_t>(id));
    }
  } else {
    for (const auto& text : a.prompt_ids) prompts.push_back(parse_ids(text));
  }
  int longest = 0;
  for (const auto& p : prompts) {
    if (p.empty()) fail("a prompt has no tokens", 2);
    longest = std::max(longest, static_cast<int>(p.size()));
  }
  const int context = longest + a.max_tokens;
  if (context > config.max_model_len()) {
    fail("prompt + max tokens = " + std::to_string(context) + " exceeds the model's " +
             std::to_string(config.max_model_len()),
         2);
  }

  model::ModelOptions options;
  options.max_num_tokens = longest;
  options.max_num_sequences = 1;
  const auto load_start = std::chrono::steady_clock::now();
  auto m = value_or_fail(model::Model::load(a.model, *backend, options));
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  // One slot of contiguous KV, per-layer layout [1, context, kv_heads, head_dim].
  std::vector<std::unique_ptr<model::BackendBuffer>> kv_buffers;
  std::vector<KvLayerView> kv_layers;
  {
    const model::ModelConfig& c = m->config();
    const std::int64_t token_elems = static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
    const std::size_t bytes =
        static_cast<std::size_t>(context) * token_elems * dtype_size(m->kv_dtype());
    for (int l = 0; l < c.num_layers; ++l) {
      KvLayerView view{.dtype = m->kv_dtype(),
                       .device = backend->device(),
                       .num_slots = 1,
                       .max_ctx = context,
                       .num_kv_heads = c.num_kv_heads,
                       .head_dim = c.head_dim,
                       .slot_stride = token_elems * context,
                       .token_stride = token_elems,
                       .head_stride = c.head_dim};
      for (void** half : {&view.k, &view.v}) {
        kv_buffers.push_back(value_or_fail(backend->allocate(bytes)));
        *half = kv_buffers.back()->data();
      }
      kv_layers.push_back(view);
    }
  }
  const KvCacheView kv{.contiguous = kv_layers, .paged = {}};
  model::StepPlan plan;
  std::fprintf(stderr, "model: %s, %d layers, %.2f GB weights on %s, loaded in %.1f s\n",
               std::string(model::architecture_name(m->config().arch)).c_str(),
               m->config().num_layers, static_cast<double>(m->weight_bytes()) / 1e9,
               backend->description().c_str(), load_s);

  const model::GenerationConfig& gen = m->generation_config();
  kernels::SamplingConfig sc;
  sc.temperature =
      a.temperature
          ? *a.temperature
          : (gen.do_sample && gen.temperature ? *gen.temperature : (gen.do_sample ? 1.0f : 0.0f));
  sc.top_p = a.top_p ? *a.top_p : (gen.do_sample && gen.top_p ? *gen.top_p : 1.0f);
  sc.top_k = a.top_k ? *a.top_k : (gen.do_sample && gen.top_k ? *gen.top_k : 0);
  sc.min_p = a.min_p ? *a.min_p : 0.0f;
  sc.seed = a.seed;
  std::vector<int> eos = gen.eos_token_ids.empty() ? m->config().eos_token_ids : gen.eos_token_ids;

  std::ofstream dump;
  if (!a.dump_logits.empty()) {
    dump.open(a.dump_logits, std::ios::binary | std::ios::trunc);
    if (!dump) fail("cannot write " + a.dump_logits);
  }

  for (const auto& prompt : prompts) {
    std::optional<tokenizer::IncrementalDetokenizer> detok;
    if (tok) detok.emplace(*tok, /*skip_special_tokens=*/true);
    const int vocab = m->config().vocab_size;
    std::vector<float> logits(dump.is_open() ? vocab : 0);
    std::vector<kernels::SampleRequest> request(1);
    std::vector<kernels::SampleResult> sampled(1);
    std::vector<std::int32_t> output;
    HybridBatch batch;
    batch.prefills.push_back({.slot = 0,
                              .cached_len = 0,
                              .num_new = static_cast<int>(prompt.size()),
                              .token_offset = 0});
    batch.token_ids = prompt;
    for (int i = 0; i < static_cast<int>(prompt.size()); ++i) batch.positions.push_back(i);
    const auto start = std::chrono::steady_clock::now();
    double first_token_s = 0.0;
    for (int step = 0; step < a.max_tokens; ++step) {
      const TensorView out = value_or_fail(m->forward(batch, kv, plan));
      if (dump.is_open()) {
        if (Status s = backend->download(out.data(), vocab * sizeof(float), logits.data());
            !s.ok()) {
          fail(s.to_string());
        }
        dump.write(reinterpret_cast<const char*>(logits.data()), vocab * sizeof(float));
      }
      // Sampled by the backend (the GPU sampler on CUDA): only the id returns.
      sc.index = static_cast<std::uint64_t>(step);
      request[0] = {
          .row = 0, .config = sc, .prompt_ids = prompt, .output_ids = output, .suppressed_ids = {}};
      if (Status s = backend->sample(out, request, sampled); !s.ok()) fail(s.to_string());
      const std::int32_t next = sampled[0].token;
      if (step == 0) {
        first_token_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      output.push_back(next);
      if (detok) {
        std::fputs(value_or_fail(detok->feed(next)).c_str(), stdout);
        std::fflush(stdout);
      }
      if (!a.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) break;
      const int pos = static_cast<int>(prompt.size() + output.size()) - 1;
      batch.clear();
      batch.decodes.push_back({.slot = 0, .cached_len = pos, .num_new = 1, .token_offset = 0});
      batch.token_ids.push_back(next);
      batch.positions.push_back(pos);
    }
    const double total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (detok) {
      std::fputs(value_or_fail(detok->finish()).c_str(), stdout);
      std::fputc('\n', stdout);
    } else {
      std::printf("{\"prompt_ids\":[");
      for (std::size_t i = 0; i < prompt.size(); ++i) std::printf("%s%d", i ? "," : "", prompt[i]);
      std::printf("],\"output_ids\":[");
      for (std::size_t i = 0; i < output.size(); ++i) std::printf("%s%d", i ? "," : "", output[i]);
      std::printf("]}\n");
    }
    const double decode_s = total_s - first_token_s;
    std::fprintf(stderr,
                 "%zu prompt tokens, %zu generated; first token %.1f ms, %.2f ms/token after\n",
                 prompt.size(), output.size(), first_token_s * 1e3,
                 output.size() > 1 ? decode_s * 1e3 / static_cast<double>(output.size() - 1) : 0.0);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("generate", "Generate text from a prompt, streamed to the terminal");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("--model", a->model, "Hugging Face model folder")->required();
  cmd->add_option("--prompt", a->prompt, "Prompt text (encoded with the model's tokenizer)");
  cmd->add_option("--prompt-ids", a->prompt_ids,
                  "Prompt as comma-separated token ids; repeat for several prompts (prints ids)");
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", a->temperature,
                  "0 is greedy (default: generation_config.json's, greedy without do_sample)");
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass");
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens");
  cmd->add_option("--min-p", a->min_p, "Drop tokens below min_p * p_max");
  cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at end-of-sequence tokens");
  cmd->add_option("--device", a->device, "auto, cuda or cpu")->capture_default_str();
  cmd->add_option("--dtype", a->dtype,
                  "GPU compute dtype: bf16, fp16, fp32 (default: the model's)");
  cmd->add_option("--attention", a->attention,
                  "GPU attention: serial, pod, or simple (serial through the exact kernel)")
      ->capture_default_str();
  cmd->add_option("--dump-logits", a->dump_logits, "Write each step's fp32 logits to this file");
  cmd->callback([a] { run(*a); });
}

}  // namespace vpod::cli
