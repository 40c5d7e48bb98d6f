// `vpod generate`: one-shot generation streamed to the terminal, through the
// same engine stack as `vpod serve` (engine::EngineStack: the engine, its
// scheduler and the real KV cache) with serve's sampling defaults (a request
// that names no sampling field). With --prompt-ids it takes token ids instead
// of text and prints the ids it generated as JSON (the transformers
// comparison, tools/model/compare_hf.py, drives it that way); --dump-logits
// writes every generated token's fp32 logits. Several --prompt-ids run one
// after another, each alone in the engine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/stack_flags.h"
#include "engine/engine_stack.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace vpod::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct GenerateArgs {
  engine::StackOptions stack;
  std::string model, prompt, dump_logits;
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

// The request: serve's defaults (engine::SamplingParams / StopParams as a
// request that names no field gets them), then the flags that were given.
engine::RequestSpec make_spec(const GenerateArgs& a, std::vector<std::int32_t> prompt) {
  engine::RequestSpec spec;
  spec.prompt_token_ids = std::move(prompt);
  engine::SamplingParams& s = spec.sampling;
  if (a.temperature) s.temperature = *a.temperature;
  if (a.top_p) s.top_p = *a.top_p;
  if (a.top_k) s.top_k = *a.top_k;
  if (a.min_p) s.min_p = *a.min_p;
  s.seed = a.seed;
  spec.stop.max_tokens = a.max_tokens;
  spec.stop.ignore_eos = a.ignore_eos;
  return spec;
}

// Each sampled row's logits, appended to `out` ([generated tokens, vocab]
// fp32 per prompt, prompts one after another).
engine::LogitsObserver dump_observer(std::shared_ptr<std::ofstream> out,
                                     std::shared_ptr<const model::Model*> model) {
  return [out, model, row = std::vector<float>()](
             const TensorView& logits, std::span<const engine::SampleSpec> samples) mutable {
    const model::Model& m = **model;
    const auto vocab = static_cast<std::size_t>(m.config().vocab_size);
    row.resize(vocab);
    for (const engine::SampleSpec& spec : samples) {
      const char* src = static_cast<const char*>(logits.data()) +
                        static_cast<std::size_t>(spec.sequence_index) * vocab * sizeof(float);
      VPOD_RETURN_IF_ERROR(m.backend().download(src, vocab * sizeof(float), row.data()));
      out->write(reinterpret_cast<const char*>(row.data()),
                 static_cast<std::streamsize>(vocab * sizeof(float)));
    }
    return Status{};
  };
}

void run(GenerateArgs& a) {
  if (a.prompt.empty() == a.prompt_ids.empty())
    fail("give exactly one of --prompt, --prompt-ids", 2);
  if (a.max_tokens < 1) fail("--max-tokens must be >= 1", 2);
  engine::StackOptions& o = a.stack;
  o.model_dir = a.model;
  o.load_tokenizer = !a.prompt.empty();

  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::vector<std::vector<std::int32_t>> prompts;
  if (!a.prompt.empty()) {
    tok = std::make_shared<const tokenizer::Tokenizer>(
        value_or_fail(tokenizer::Tokenizer::from_file(a.model)));
    o.tokenizer = tok;
    prompts.push_back(value_or_fail(tok->encode(a.prompt, /*add_special_tokens=*/true)));
  } else {
    for (const auto& text : a.prompt_ids) prompts.push_back(parse_ids(text));
  }
  int longest = 0;
  for (const auto& p : prompts) {
    if (p.empty()) fail("a prompt has no tokens", 2);
    longest = std::max(longest, static_cast<int>(p.size()));
  }
  // Sized for this run unless the flags say otherwise: the longest prompt in
  // one step, a KV slot of prompt + max tokens.
  const int context = longest + a.max_tokens;
  const model::ModelConfig config = value_or_fail(model::load_model_config(a.model));
  if (context > config.max_model_len()) {
    fail("prompt + max tokens = " + std::to_string(context) + " exceeds the model's " +
             std::to_string(config.max_model_len()),
         2);
  }
  if (o.max_model_len == 0) o.max_model_len = context;
  if (o.max_num_batched_tokens == 0) o.max_num_batched_tokens = longest;

  std::shared_ptr<std::ofstream> dump;
  auto model_ptr = std::make_shared<const model::Model*>(nullptr);
  if (!a.dump_logits.empty()) {
    dump = std::make_shared<std::ofstream>(a.dump_logits, std::ios::binary | std::ios::trunc);
    if (!*dump) fail("cannot write " + a.dump_logits);
    o.logits_observer = dump_observer(dump, model_ptr);
  }

  const auto load_start = Clock::now();
  std::unique_ptr<engine::EngineStack> stack = value_or_fail(engine::EngineStack::build(o));
  *model_ptr = &stack->model();
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  const model::Model& m = stack->model();
  std::fprintf(stderr, "model: %s, %d layers, %.2f GB weights, loaded in %.1f s\n",
               std::string(model::architecture_name(m.config().arch)).c_str(),
               m.config().num_layers, static_cast<double>(m.weight_bytes()) / 1e9, load_s);
  std::fprintf(stderr, "backend: %s\n", stack->summary().c_str());

  for (auto& prompt : prompts) {
    const std::size_t num_prompt = prompt.size();
    const std::vector<std::int32_t> prompt_ids = prompt;
    const auto start = Clock::now();
    auto stream = value_or_fail(stack->engine().submit(make_spec(a, std::move(prompt))));
    std::vector<std::int32_t> output;
    double first_token_s = 0.0;
    engine::RequestOutput out;
    for (bool finished = false; !finished;) {
      if (!stream->pop(out, std::chrono::milliseconds(1000))) continue;
      if (output.empty() && !out.token_ids.empty()) {
        first_token_s = std::chrono::duration<double>(Clock::now() - start).count();
      }
      output.insert(output.end(), out.token_ids.begin(), out.token_ids.end());
      if (tok) {
        std::fputs(out.text.c_str(), stdout);
        std::fflush(stdout);
      }
      finished = out.finished;
    }
    if (out.finish_reason == engine::FinishReason::error) fail(out.error);
    if (out.finish_reason == engine::FinishReason::abort) fail("the request was aborted");
    const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (tok) {
      std::fputc('\n', stdout);
    } else {
      std::printf("{\"prompt_ids\":[");
      for (std::size_t i = 0; i < num_prompt; ++i) std::printf("%s%d", i ? "," : "", prompt_ids[i]);
      std::printf("],\"output_ids\":[");
      for (std::size_t i = 0; i < output.size(); ++i) std::printf("%s%d", i ? "," : "", output[i]);
      std::printf("]}\n");
    }
    const double decode_s = total_s - first_token_s;
    std::fprintf(stderr,
                 "%zu prompt tokens, %zu generated; first token %.1f ms, %.2f ms/token after\n",
                 num_prompt, output.size(), first_token_s * 1e3,
                 output.size() > 1 ? decode_s * 1e3 / static_cast<double>(output.size() - 1) : 0.0);
  }
  stack.reset();  // stops the engine: no step writes to the dump any more
  if (dump && !dump->flush()) fail("cannot write " + a.dump_logits);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("generate", "Generate text from a prompt, streamed to the terminal");
  auto a = std::make_shared<GenerateArgs>();
  // One request at a time; 0 below: sized from the prompts (see run()).
  a->stack.max_num_seqs = 1;
  a->stack.max_num_batched_tokens = 0;
  cmd->add_option("--model", a->model, "Hugging Face model folder")->required();
  cmd->add_option("--prompt", a->prompt, "Prompt text (encoded with the model's tokenizer)");
  cmd->add_option("--prompt-ids", a->prompt_ids,
                  "Prompt as comma-separated token ids; repeat for several prompts (prints ids)");
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "0 is greedy (default: vpod serve's, 1)");
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass");
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens");
  cmd->add_option("--min-p", a->min_p, "Drop tokens below min_p * p_max");
  cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at end-of-sequence tokens");
  cmd->add_option("--dump-logits", a->dump_logits,
                  "Write each generated token's fp32 logits to this file");
  add_stack_flags(*cmd, a->stack);
  cmd->get_option("--max-model-len")
      ->description("Prompt + output tokens per request (default: longest prompt + --max-tokens)");
  cmd->get_option("--max-num-batched-tokens")
      ->description("Tokens per engine step (default: the longest prompt, so it runs in one step)");
  cmd->callback([a] { run(*a); });
}

}  // namespace vpod::cli
