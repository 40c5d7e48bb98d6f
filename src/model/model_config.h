// What a Hugging Face model folder says about the model: config.json (the
// architecture and its shapes) and generation_config.json (stop tokens and
// default sampling values). Parsing is strict: a field vpod would silently
// misread (an unknown rope_scaling type, an active sliding window, a non-SiLU
// activation) is an error that names the field and the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace vpod::model {

enum class Architecture : std::uint8_t {
  llama,    // LlamaForCausalLM (Llama 2/3, Yi)
  mistral,  // MistralForCausalLM
  qwen2,    // Qwen2ForCausalLM: bias on q/k/v
  qwen3,    // Qwen3ForCausalLM: per-head RMSNorm on q and k
};

// "LlamaForCausalLM", ...
std::string_view architecture_name(Architecture arch);

enum class RopeScaling : std::uint8_t { none, linear, llama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;  // linear and llama3
  // llama3 only (see rope_inv_freq in src/kernels/rope/rope.h).
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture arch = Architecture::llama;
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // config's head_dim, else hidden_size / num_q_heads
  float rms_norm_eps = 1e-6f;
  // The std of the matrices' random init (HF's initializer_range): only
  // --load-format dummy reads it.
  float initializer_range = 0.02f;
  RopeConfig rope;
  int max_position_embeddings = 0;
  // Attention window; 0 when the model attends to the whole context. A window
  // is supported by limiting the context to it (see max_model_len()).
  int sliding_window = 0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;      // q/k/v projections carry a bias (Qwen2, attention_bias)
  bool o_bias = false;        // o_proj carries a bias (Llama's attention_bias)
  bool qk_norm = false;       // Qwen3: RMSNorm over each q and k head
  DType dtype = DType::bf16;  // torch_dtype / dtype
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  int q_size() const { return num_q_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  // The longest context vpod serves for this model: the position limit, and
  // the sliding window when one is active (within the window, windowed
  // attention equals full attention, so no kernel needs a window).
  int max_model_len() const;
  // Parameters per layer and in total (for memory accounting and reports).
  std::int64_t num_parameters() const;
};

// Parses config.json text. `source` names the file in error messages.
Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source);
Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir);

struct GenerationConfig {
  std::vector<int> eos_token_ids;  // may be empty (then the config's are used)
  std::optional<int> bos_token_id;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int> max_new_tokens;
  bool do_sample = false;
};

Result<GenerationConfig> parse_generation_config(std::string_view json_text,
                                                 std::string_view source);
// A missing generation_config.json gives the empty default.
Result<GenerationConfig> load_generation_config(const std::filesystem::path& model_dir);

// Reads a whole (small) text file; the error names the path.
Result<std::string> read_text_file(const std::filesystem::path& path,
                                   std::size_t max_bytes = 64u << 20);

}  // namespace vpod::model
