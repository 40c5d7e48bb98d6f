// `vpod make-model`: a random-weight model in Hugging Face layout.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "model/make_model.h"

namespace vpod::cli {

void add_make_model_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-model",
                                 "Write a random-weight model in Hugging Face layout (config.json, "
                                 "generation_config.json, model.safetensors, tokenizer files)");
  struct Args {
    std::string out, preset = "tiny", tokenizer, dtype;
    std::uint64_t seed = 0;
    int threads = 0;
    bool no_tokenizer = false;
    bool no_weights = false;
  };
  auto args = std::make_shared<Args>();
  std::string presets;
  for (const auto& p : model::model_presets()) presets += (presets.empty() ? "" : ", ") + p.name;
  cmd->add_option("--out", args->out, "Output folder")->required();
  cmd->add_option("--preset", args->preset, "One of: " + presets)->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "Folder whose tokenizer files are copied (default: the preset's fixture; the "
                  "Yi presets extend its vocab to the model's 64000 ids)");
  cmd->add_flag("--no-tokenizer", args->no_tokenizer, "Write no tokenizer files");
  cmd->add_flag("--no-weights", args->no_weights,
                "Write no model.safetensors: serve it with --load-format dummy, which makes the "
                "same weights (same --seed) in memory");
  cmd->add_option("--seed", args->seed, "PRNG seed (same seed, same bytes)")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "bf16, fp16 or fp32 (default: the preset's)");
  cmd->add_option("--threads", args->threads, "Generator threads (0: all cores)");
  cmd->callback([args] {
    model::MakeModelOptions options;
    options.out_dir = args->out;
    options.preset = args->preset;
    options.seed = args->seed;
    options.num_threads = args->threads;
    options.with_tokenizer = !args->no_tokenizer;
    options.with_weights = !args->no_weights;
    if (!args->tokenizer.empty()) options.tokenizer_dir = args->tokenizer;
    if (!args->dtype.empty()) {
      auto dtype = parse_dtype(args->dtype);
      if (!dtype.ok()) {
        std::fprintf(stderr, "vpod make-model: %s\n", dtype.status().message().c_str());
        throw CLI::RuntimeError(2);
      }
      options.dtype = *dtype;
    }
    const auto start = std::chrono::steady_clock::now();
    auto written = model::make_model(options);
    if (!written.ok()) {
      std::fprintf(stderr, "vpod make-model: %s\n", written.status().to_string().c_str());
      throw CLI::RuntimeError(1);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& f : *written) std::printf("wrote %s\n", f.c_str());
    std::printf("make-model: preset %s, seed %llu in %.1f s\n", args->preset.c_str(),
                static_cast<unsigned long long>(args->seed), seconds);
  });
}

}  // namespace vpod::cli
