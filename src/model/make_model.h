// `vpod make-model`: writes a model with random weights in exact Hugging Face
// layout (config.json, generation_config.json, model.safetensors, tokenizer
// files), for tests and benchmarks where no real weights can be downloaded.
//
// The weights are a pure function of (seed, tensor name, element index), so
// the same seed gives the same bytes on every machine and any thread count:
//
//   key(name)   = splitmix64(seed ^ fnv1a64(name))
//   bits(i)     = splitmix64(key(name) + i)      (64-bit wrap-around)
//   u(i)        = (bits(i) >> 40) * 2^-24        in [0, 1), exact in float
//   matrix:  w  = (2 u + 2^-24 - 1) * sqrt(3) * initializer_range
//                 (uniform, symmetric, std = initializer_range)
//   norm:    w  = 1 + (2 u + 2^-24 - 1) * 0.25
//   bias:    w  = (2 u + 2^-24 - 1) * 0.1
// computed in float32 (no transcendental functions) and rounded to the
// stored dtype with round-to-nearest-even. splitmix64(x) is Vigna's finalizer:
//   z = x + 0x9E3779B97F4A7C15; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
//   z = (z ^ z>>27) * 0x94D049BB133111EB; return z ^ z>>31.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/splitmix64.h"
#include "common/status.h"
#include "model/model_config.h"
#include "model/weight_layout.h"

namespace vpod::model {

struct ModelPreset {
  std::string name;
  ModelConfig config;
  float initializer_range = 0.02f;
  std::string tokenizer_fixture;  // folder under fixtures/tokenizers
  // The real tokenizer covers every id below vocab_size but the fixture is
  // smaller: make-model extends its vocab (model/tokenizer_stand_in.h).
  bool extend_tokenizer_to_vocab = false;
  // generation_config.json defaults
  bool do_sample = false;
  float temperature = 1.0f;
  float top_p = 1.0f;
};

// All presets: tiny, tiny-qwen2, tiny-qwen3 (CPU tests), test-llama3,
// test-qwen2, test-qwen3 (GPU comparisons: 4 layers, hidden 1024, head dim
// 128), llama3-8b, llama3-70b, llama2-7b, mistral-7b, yi-6b, qwen2-7b,
// qwen3-8b.
const std::vector<ModelPreset>& model_presets();
Result<ModelPreset> find_preset(const std::string& name);

struct MakeModelOptions {
  std::filesystem::path out_dir;
  std::string preset = "tiny";
  std::optional<std::filesystem::path> tokenizer_dir;  // default: the preset's fixture
  bool with_tokenizer = true;
  // false: config, generation config and tokenizer only (for --load-format
  // dummy, which makes the same weights in memory).
  bool with_weights = true;
  std::uint64_t seed = 0;
  std::optional<DType> dtype;  // default: the preset's torch_dtype
  int num_threads = 0;         // 0: hardware concurrency
};

// Writes the model; returns the files written (for the CLI to print).
Result<std::vector<std::string>> make_model(const MakeModelOptions& options);

// Where the shared tokenizer fixtures are: $VPOD_FIXTURES, ../shared/fixtures
// beside the source tree, /work/shared/fixtures. Empty when none exists.
std::filesystem::path find_fixtures_dir();

// The PRNG above (common/splitmix64.h), exposed for tests and the Python reference.
using vpod::splitmix64;
std::uint64_t fnv1a64(std::string_view text);
float random_weight_value(std::uint64_t key, std::uint64_t index, int init_kind,
                          float initializer_range);
// key(name) above for `seed`.
std::uint64_t random_weight_key(std::uint64_t seed, std::string_view name);
// Elements [first, first + count) of a tensor with `key` and `init`, stored
// in `dtype` at `dst` (which points at element `first`): make-model's bytes,
// also what --load-format dummy loads (model/weight_source.h).
void fill_random_weights(std::uint64_t key, WeightInit init, float initializer_range, DType dtype,
                         std::int64_t first, std::int64_t count, std::uint8_t* dst);

// config.json text for a config (Hugging Face transformers 4 spelling).
std::string model_config_json(const ModelConfig& config, float initializer_range);

}  // namespace vpod::model
