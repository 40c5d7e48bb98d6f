// `vpod make-model` (make_model.h): the presets, the seeded random weights, and
// the writing of config.json, generation_config.json, model.safetensors and the
// tokenizer files.

#include "model/make_model.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "model/safetensors.h"
#include "model/tokenizer_stand_in.h"
#include "model/weight_layout.h"

namespace vpod::model {

namespace {

using ordered_json = nlohmann::ordered_json;

ModelConfig base(Architecture arch, int vocab, int hidden, int inter, int layers, int heads,
                 int kv_heads, int head_dim, double theta, int max_pos, float eps, DType dtype) {
  ModelConfig c;
  c.arch = arch;
  static const char* types[] = {"llama", "mistral", "qwen2", "qwen3"};
  c.model_type = types[static_cast<int>(arch)];
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_q_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.rope.theta = theta;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = eps;
  c.dtype = dtype;
  c.qkv_bias = arch == Architecture::qwen2;
  c.qk_norm = arch == Architecture::qwen3;
  return c;
}

ModelPreset preset(std::string name, ModelConfig config) {
  ModelPreset p;
  p.name = std::move(name);
  p.config = std::move(config);
  return p;
}

void llama3_rope(ModelConfig& c) {
  c.rope.scaling = RopeScaling::llama3;
  c.rope.factor = 8.0;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_position_embeddings = 8192;
}

std::vector<ModelPreset> build_presets() {
  std::vector<ModelPreset> p;
  const int llama3_vocab = 128256;
  const int qwen_vocab = 151936;
  {
    // Llama-3 shaped and tokenized, small enough for CPU tests.
    ModelPreset m = preset("tiny", base(Architecture::llama, llama3_vocab, 64, 128, 2, 4, 2, 16,
                                        500000.0, 131072, 1e-5f, DType::bf16));
    llama3_rope(m.config);
    m.config.bos_token_id = 128000;
    m.config.eos_token_ids = {128001, 128009};
    m.tokenizer_fixture = "llama3";
    p.push_back(m);
  }
  {
    ModelPreset m = preset("tiny-qwen2", base(Architecture::qwen2, qwen_vocab, 64, 160, 2, 4, 2, 16,
                                              1000000.0, 32768, 1e-6f, DType::bf16));
    m.config.tie_word_embeddings = true;
    m.config.bos_token_id = 151643;
    m.config.eos_token_ids = {151643};
    m.tokenizer_fixture = "qwen3";
    p.push_back(m);
  }
  {
    // head_dim 32 != hidden / heads = 16: exercises the head_dim override.
    ModelPreset m = preset("tiny-qwen3", base(Architecture::qwen3, qwen_vocab, 64, 96, 2, 4, 1, 32,
                                              1000000.0, 40960, 1e-6f, DType::bf16));
    m.config.bos_token_id = 151643;
    m.config.eos_token_ids = {151645, 151643};
    m.tokenizer_fixture = "qwen3";
    p.push_back(m);
  }
  // GPU comparison models: 4 layers, hidden 1024, head dim 128.
  {
    ModelPreset m = preset("test-llama3", base(Architecture::llama, llama3_vocab, 1024, 2816, 4, 8,
                                               2, 128, 500000.0, 131072, 1e-5f, DType::bf16));
    llama3_rope(m.config);
    m.config.bos_token_id = 128000;
    m.config.eos_token_ids = {128001, 128009};
    m.tokenizer_fixture = "llama3";
    p.push_back(m);
  }
  {
    ModelPreset m = preset("test-qwen2", base(Architecture::qwen2, qwen_vocab, 1024, 2816, 4, 8, 2,
                                              128, 1000000.0, 32768, 1e-6f, DType::bf16));
    m.config.tie_word_embeddings = true;
    m.config.bos_token_id = 151643;
    m.config.eos_token_ids = {151643};
    m.tokenizer_fixture = "qwen3";
    p.push_back(m);
  }
  {
    ModelPreset m = preset("test-qwen3", base(Architecture::qwen3, qwen_vocab, 1024, 3072, 4, 16, 4,
                                              128, 1000000.0, 40960, 1e-6f, DType::bf16));
    m.config.tie_word_embeddings = true;
    m.config.bos_token_id = 151643;
    m.config.eos_token_ids = {151645, 151643};
    m.tokenizer_fixture = "qwen3";
    p.push_back(m);
  }
  // Real shapes (benchmarks).
  {
    // Llama-3.1-8B.
    ModelPreset m = preset("llama3-8b", base(Architecture::llama, llama3_vocab, 4096, 14336, 32, 32,
                                             8, 128, 500000.0, 131072, 1e-5f, DType::bf16));
    llama3_rope(m.config);
    m.config.bos_token_id = 128000;
    m.config.eos_token_ids = {128001, 128008, 128009};
    m.tokenizer_fixture = "llama3";
    m.do_sample = true;
    m.temperature = 0.6f;
    m.top_p = 0.9f;
    p.push_back(m);
  }
  {
    // Llama-3.1-70B: 80 layers, hidden 8192, 64 heads, 8 KV heads (141 GB in
    // bf16; tensor parallelism's target: each of 2 GPUs loads its half).
    ModelPreset m = preset("llama3-70b", base(Architecture::llama, llama3_vocab, 8192, 28672, 80,
                                              64, 8, 128, 500000.0, 131072, 1e-5f, DType::bf16));
    llama3_rope(m.config);
    m.config.bos_token_id = 128000;
    m.config.eos_token_ids = {128001, 128008, 128009};
    m.tokenizer_fixture = "llama3";
    m.do_sample = true;
    m.temperature = 0.6f;
    m.top_p = 0.9f;
    p.push_back(m);
  }
  {
    ModelPreset m = preset("llama2-7b", base(Architecture::llama, 32000, 4096, 11008, 32, 32, 32,
                                             128, 10000.0, 4096, 1e-5f, DType::f16));
    m.config.bos_token_id = 1;
    m.config.eos_token_ids = {2};
    m.tokenizer_fixture = "mistral";  // the same 32000-token SentencePiece-BPE size
    p.push_back(m);
  }
  {
    // Mistral-7B v0.2 (no sliding window).
    ModelPreset m = preset("mistral-7b", base(Architecture::mistral, 32000, 4096, 14336, 32, 32, 8,
                                              128, 1000000.0, 32768, 1e-5f, DType::bf16));
    m.config.bos_token_id = 1;
    m.config.eos_token_ids = {2};
    m.tokenizer_fixture = "mistral";
    p.push_back(m);
  }
  // Yi-6B, and Yi-6B-200K (the same weights' shapes with a 200K context, as the
  // papers' long-prompt experiments need); its 64000-token tokenizer is not a
  // fixture: the 32000-token one stands in, extended to 64000 ids so that every
  // id the model emits has text, as with the real one.
  for (const auto& [name, context] : {std::pair{"yi-6b", 4096}, std::pair{"yi-6b-200k", 200000}}) {
    ModelPreset m = preset(name, base(Architecture::llama, 64000, 4096, 11008, 32, 32, 4, 128,
                                      5000000.0, context, 1e-5f, DType::bf16));
    m.config.bos_token_id = 1;
    m.config.eos_token_ids = {2};
    m.tokenizer_fixture = "mistral";
    m.extend_tokenizer_to_vocab = true;
    p.push_back(m);
  }
  {
    ModelPreset m = preset("qwen2-7b", base(Architecture::qwen2, 152064, 3584, 18944, 28, 28, 4,
                                            128, 1000000.0, 32768, 1e-6f, DType::bf16));
    m.config.bos_token_id = 151643;
    m.config.eos_token_ids = {151643};
    m.tokenizer_fixture = "qwen3";
    p.push_back(m);
  }
  {
    ModelPreset m = preset("qwen3-8b", base(Architecture::qwen3, qwen_vocab, 4096, 12288, 36, 32, 8,
                                            128, 1000000.0, 40960, 1e-6f, DType::bf16));
    m.config.bos_token_id = 151643;
    m.config.eos_token_ids = {151645, 151643};
    m.tokenizer_fixture = "qwen3";
    m.do_sample = true;
    m.temperature = 0.6f;
    m.top_p = 0.95f;
    p.push_back(m);
  }
  return p;
}

// Sets the element type's bits from a float (round to nearest even).
void store(std::uint8_t* dst, DType dtype, std::int64_t i, float v) {
  switch (dtype) {
    case DType::f32: std::memcpy(dst + 4 * i, &v, 4); break;
    case DType::f16: {
      const std::uint16_t b = float_to_half_bits(v);
      std::memcpy(dst + 2 * i, &b, 2);
      break;
    }
    case DType::bf16: {
      const std::uint16_t b = float_to_bf16_bits(v);
      std::memcpy(dst + 2 * i, &b, 2);
      break;
    }
  }
}

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return not_found(path.string() + ": cannot create");
  out << text;
  out.close();
  if (!out) return internal_error(path.string() + ": write failed");
  return {};
}

}  // namespace

std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

float random_weight_value(std::uint64_t key, std::uint64_t index, int init_kind,
                          float initializer_range) {
  constexpr float kTwoPowMinus24 = 1.0f / 16777216.0f;
  const std::uint64_t bits = splitmix64(key + index);
  const float u = static_cast<float>(bits >> 40) * kTwoPowMinus24;
  const float sym = 2.0f * u + kTwoPowMinus24 - 1.0f;  // (-1, 1), symmetric
  switch (static_cast<WeightInit>(init_kind)) {
    case WeightInit::normal_like: return sym * (1.7320508f * initializer_range);
    case WeightInit::norm: return 1.0f + sym * 0.25f;
    case WeightInit::bias: return sym * 0.1f;
  }
  return 0.0f;
}

std::uint64_t random_weight_key(std::uint64_t seed, std::string_view name) {
  return splitmix64(seed ^ fnv1a64(name));
}

void fill_random_weights(std::uint64_t key, WeightInit init, float initializer_range, DType dtype,
                         std::int64_t first, std::int64_t count, std::uint8_t* dst) {
  const int kind = static_cast<int>(init);
  for (std::int64_t i = 0; i < count; ++i) {
    store(dst, dtype, i,
          random_weight_value(key, static_cast<std::uint64_t>(first + i), kind, initializer_range));
  }
}

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = build_presets();
  return presets;
}

Result<ModelPreset> find_preset(const std::string& name) {
  std::string names;
  for (const auto& p : model_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return invalid_argument("unknown preset '" + name + "' (presets: " + names + ")");
}

std::filesystem::path find_fixtures_dir() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("VPOD_FIXTURES"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  }
  candidates.emplace_back(std::filesystem::path(VPOD_SOURCE_DIR) / ".." / "shared" / "fixtures");
  candidates.emplace_back(std::filesystem::path(VPOD_SOURCE_DIR) / "shared" / "fixtures");
  candidates.emplace_back("/work/shared/fixtures");
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_directory(c / "tokenizers", ec)) return c;
  }
  return {};
}

std::string model_config_json(const ModelConfig& c, float initializer_range) {
  ordered_json j;
  j["architectures"] = {std::string(architecture_name(c.arch))};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_q_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope.theta;
  switch (c.rope.scaling) {
    case RopeScaling::none: j["rope_scaling"] = nullptr; break;
    case RopeScaling::linear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope.factor}};
      break;
    case RopeScaling::llama3:
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", c.rope.factor},
          {"low_freq_factor", c.rope.low_freq_factor},
          {"high_freq_factor", c.rope.high_freq_factor},
          {"original_max_position_embeddings", c.rope.original_max_position_embeddings}};
      break;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.arch == Architecture::llama || c.arch == Architecture::qwen3) {
    j["attention_bias"] = c.o_bias;
  }
  if (c.arch == Architecture::llama) j["mlp_bias"] = false;
  if (c.arch == Architecture::mistral) {
    j["sliding_window"] = c.sliding_window > 0 ? ordered_json(c.sliding_window) : ordered_json();
  }
  if (c.arch == Architecture::qwen2 || c.arch == Architecture::qwen3) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.num_layers;
  }
  j["initializer_range"] = initializer_range;
  j["torch_dtype"] = std::string(c.dtype == DType::f32   ? "float32"
                                 : c.dtype == DType::f16 ? "float16"
                                                         : "bfloat16");
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

Result<std::vector<std::string>> make_model(const MakeModelOptions& options) {
  VPOD_ASSIGN_OR_RETURN(ModelPreset preset, find_preset(options.preset));
  ModelConfig& config = preset.config;
  if (options.dtype) config.dtype = *options.dtype;

  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) {
    return invalid_argument(options.out_dir.string() + ": cannot create (" + ec.message() + ")");
  }
  std::vector<std::string> written;

  // Tokenizer first: a missing fixture fails before gigabytes are written.
  std::vector<std::filesystem::path> tokenizer_files;
  if (options.with_tokenizer) {
    std::filesystem::path tok_dir;
    if (options.tokenizer_dir) {
      tok_dir = *options.tokenizer_dir;
    } else {
      const auto fixtures = find_fixtures_dir();
      if (fixtures.empty()) {
        return not_found("no tokenizer fixtures found (set VPOD_FIXTURES or pass --tokenizer DIR)");
      }
      tok_dir = fixtures / "tokenizers" / preset.tokenizer_fixture;
    }
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                             "tokenizer.model"}) {
      if (std::filesystem::exists(tok_dir / name)) tokenizer_files.push_back(tok_dir / name);
    }
    if (tokenizer_files.empty() || !std::filesystem::exists(tok_dir / "tokenizer.json")) {
      return not_found(tok_dir.string() + ": no tokenizer.json");
    }
  }

  const auto config_path = options.out_dir / "config.json";
  VPOD_RETURN_IF_ERROR(
      write_text(config_path, model_config_json(config, preset.initializer_range)));
  written.push_back(config_path.string());

  ordered_json gen;
  if (config.bos_token_id) gen["bos_token_id"] = *config.bos_token_id;
  gen["eos_token_id"] = config.eos_token_ids.size() == 1 ? ordered_json(config.eos_token_ids[0])
                                                         : ordered_json(config.eos_token_ids);
  gen["do_sample"] = preset.do_sample;
  if (preset.do_sample) {
    gen["temperature"] = preset.temperature;
    gen["top_p"] = preset.top_p;
  }
  const auto gen_path = options.out_dir / "generation_config.json";
  VPOD_RETURN_IF_ERROR(write_text(gen_path, gen.dump(2) + "\n"));
  written.push_back(gen_path.string());

  for (const auto& src : tokenizer_files) {
    const auto dst = options.out_dir / src.filename();
    if (preset.extend_tokenizer_to_vocab && src.filename() == "tokenizer.json") {
      VPOD_ASSIGN_OR_RETURN(std::string text, read_text_file(src));
      auto extended = extend_tokenizer_vocab(text, config.vocab_size);
      if (!extended.ok()) return extended.status().with_context(src.string());
      VPOD_RETURN_IF_ERROR(write_text(dst, *extended));
    } else if (preset.extend_tokenizer_to_vocab && src.filename() == "tokenizer.model") {
      continue;  // SentencePiece's model would disagree with the extended tokenizer.json
    } else {
      std::filesystem::copy_file(src, dst, std::filesystem::copy_options::overwrite_existing, ec);
      if (ec) return internal_error(dst.string() + ": copy failed (" + ec.message() + ")");
    }
    written.push_back(dst.string());
  }

  const std::vector<WeightSpec> layout = weight_layout(config);
  std::vector<SafetensorsWriteEntry> entries;
  std::vector<std::uint64_t> keys;
  for (const WeightSpec& spec : layout) {
    entries.push_back({spec.name, config.dtype, spec.shape});
    keys.push_back(random_weight_key(options.seed, spec.name));
  }
  const float range = preset.initializer_range;
  const DType dtype = config.dtype;
  auto fill = [&](std::size_t index, std::int64_t first, std::int64_t count, std::uint8_t* dst) {
    fill_random_weights(keys[index], layout[index].init, range, dtype, first, count, dst);
  };
  int threads = options.num_threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto weights_path = options.out_dir / "model.safetensors";
  std::filesystem::remove(options.out_dir / "model.safetensors.index.json", ec);
  if (!options.with_weights) {
    std::filesystem::remove(weights_path, ec);  // no stale weights beside the new config
    return written;
  }
  VPOD_RETURN_IF_ERROR(write_safetensors(
      weights_path, entries,
      {{"format", "pt"}, {"vpod_preset", preset.name}, {"vpod_seed", std::to_string(options.seed)}},
      fill, threads));
  written.push_back(weights_path.string());
  return written;
}

}  // namespace vpod::model
