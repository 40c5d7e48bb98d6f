// Reading a model folder's config.json and generation_config.json
// (model_config.h): strict field parsing, RoPE scaling, and the derived sizes.

#include "model/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

namespace vpod::model {

namespace {

using nlohmann::json;

Status field_error(std::string_view source, std::string_view field, std::string_view what) {
  return invalid_argument(std::string(source) + ": field '" + std::string(field) + "' " +
                          std::string(what));
}

// A required (or defaulted) positive integer field.
Result<int> get_int(const json& j, std::string_view source, const char* key,
                    std::optional<int> fallback, int min_value = 1) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return field_error(source, key, "is missing");
  }
  if (!it->is_number_integer()) return field_error(source, key, "must be an integer");
  const std::int64_t v = it->get<std::int64_t>();
  if (v < min_value || v > std::numeric_limits<int>::max()) {
    return field_error(
        source, key,
        "is out of range (" + std::to_string(v) + ", minimum " + std::to_string(min_value) + ")");
  }
  return static_cast<int>(v);
}

Result<double> get_number(const json& j, std::string_view source, const char* key,
                          std::optional<double> fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return field_error(source, key, "is missing");
  }
  if (!it->is_number()) return field_error(source, key, "must be a number");
  return it->get<double>();
}

Result<bool> get_bool(const json& j, std::string_view source, const char* key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return field_error(source, key, "must be true or false");
  return it->get<bool>();
}

// An int, a list of ints, or null/absent (empty).
Result<std::vector<int>> get_token_list(const json& j, std::string_view source, const char* key) {
  std::vector<int> ids;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ids;
  auto add = [&](const json& v) -> Status {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() > std::numeric_limits<int>::max()) {
      return field_error(source, key, "must hold non-negative integer token ids");
    }
    ids.push_back(v.get<int>());
    return {};
  };
  if (it->is_array()) {
    for (const json& v : *it) VPOD_RETURN_IF_ERROR(add(v));
  } else {
    VPOD_RETURN_IF_ERROR(add(*it));
  }
  return ids;
}

Result<std::optional<int>> get_optional_token(const json& j, std::string_view source,
                                              const char* key) {
  VPOD_ASSIGN_OR_RETURN(std::vector<int> ids, get_token_list(j, source, key));
  if (ids.empty()) return std::optional<int>();
  if (ids.size() > 1) return field_error(source, key, "must be a single token id");
  return std::optional<int>(ids[0]);
}

Result<json> parse_json_object(std::string_view text, std::string_view source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(std::string(source) + ": not valid JSON");
  if (!j.is_object()) return invalid_argument(std::string(source) + ": not a JSON object");
  return j;
}

// Rope settings from either transformers 4's `rope_theta` + `rope_scaling` or
// transformers 5's `rope_parameters` (which holds rope_theta too).
Status parse_rope(const json& j, std::string_view source, RopeConfig& rope) {
  const json* scaling = nullptr;
  std::string field = "rope_scaling";
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return field_error(source, "rope_parameters", "must be an object");
    scaling = &*it;
    field = "rope_parameters";
  } else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && !it2->is_null()) {
    if (!it2->is_object()) return field_error(source, "rope_scaling", "must be an object");
    scaling = &*it2;
  }
  double theta = 10000.0;
  if (scaling != nullptr && scaling->contains("rope_theta")) {
    VPOD_ASSIGN_OR_RETURN(theta, get_number(*scaling, source, "rope_theta", 10000.0));
  } else {
    VPOD_ASSIGN_OR_RETURN(theta, get_number(j, source, "rope_theta", 10000.0));
  }
  if (!(theta > 1.0)) return field_error(source, "rope_theta", "must be > 1");
  rope.theta = theta;
  rope.scaling = RopeScaling::none;
  if (scaling == nullptr) return {};

  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (auto t = scaling->find(key); t != scaling->end() && !t->is_null()) {
      if (!t->is_string()) return field_error(source, field + "." + key, "must be a string");
      type = t->get<std::string>();
      break;
    }
  }
  if (type == "default") return {};
  if (type != "linear" && type != "llama3") {
    return unimplemented(std::string(source) + ": " + field + " type '" + type +
                         "' is not supported (supported: none/default, linear, llama3)");
  }
  VPOD_ASSIGN_OR_RETURN(rope.factor, get_number(*scaling, source, "factor", std::nullopt));
  if (!(rope.factor >= 1.0)) return field_error(source, field + ".factor", "must be >= 1");
  if (type == "linear") {
    rope.scaling = RopeScaling::linear;
    return {};
  }
  rope.scaling = RopeScaling::llama3;
  VPOD_ASSIGN_OR_RETURN(rope.low_freq_factor,
                        get_number(*scaling, source, "low_freq_factor", std::nullopt));
  VPOD_ASSIGN_OR_RETURN(rope.high_freq_factor,
                        get_number(*scaling, source, "high_freq_factor", std::nullopt));
  VPOD_ASSIGN_OR_RETURN(
      rope.original_max_position_embeddings,
      get_int(*scaling, source, "original_max_position_embeddings", std::nullopt));
  if (!(rope.high_freq_factor > rope.low_freq_factor) || !(rope.low_freq_factor > 0)) {
    return field_error(source, field, "needs 0 < low_freq_factor < high_freq_factor");
  }
  return {};
}

}  // namespace

std::string_view architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::llama: return "LlamaForCausalLM";
    case Architecture::mistral: return "MistralForCausalLM";
    case Architecture::qwen2: return "Qwen2ForCausalLM";
    case Architecture::qwen3: return "Qwen3ForCausalLM";
  }
  return "unknown";
}

int ModelConfig::max_model_len() const {
  return sliding_window > 0 ? std::min(max_position_embeddings, sliding_window)
                            : max_position_embeddings;
}

std::int64_t ModelConfig::num_parameters() const {
  const std::int64_t h = hidden_size;
  std::int64_t layer = 2 * h;                                          // two norms
  layer += h * (q_size() + 2 * static_cast<std::int64_t>(kv_size()));  // q, k, v
  layer += static_cast<std::int64_t>(q_size()) * h;                    // o
  layer += 3 * h * intermediate_size;                                  // gate, up, down
  if (qkv_bias) layer += q_size() + 2 * kv_size();
  if (o_bias) layer += h;
  if (qk_norm) layer += 2 * head_dim;
  std::int64_t total = layer * num_layers + h;  // + final norm
  total += static_cast<std::int64_t>(vocab_size) * h * (tie_word_embeddings ? 1 : 2);
  return total;
}

Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source) {
  VPOD_ASSIGN_OR_RETURN(json j, parse_json_object(json_text, source));
  ModelConfig c;

  std::string arch_name;
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string()) {
      return field_error(source, "architectures", "must be a non-empty list of names");
    }
    arch_name = (*it)[0].get<std::string>();
  }
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    c.model_type = it->get<std::string>();
  }
  if (arch_name.empty()) {
    static const std::pair<const char*, const char*> by_type[] = {{"llama", "LlamaForCausalLM"},
                                                                  {"mistral", "MistralForCausalLM"},
                                                                  {"qwen2", "Qwen2ForCausalLM"},
                                                                  {"qwen3", "Qwen3ForCausalLM"}};
    for (const auto& [type, name] : by_type) {
      if (c.model_type == type) arch_name = name;
    }
  }
  if (arch_name == "LlamaForCausalLM") {
    c.arch = Architecture::llama;
  } else if (arch_name == "MistralForCausalLM") {
    c.arch = Architecture::mistral;
  } else if (arch_name == "Qwen2ForCausalLM") {
    c.arch = Architecture::qwen2;
  } else if (arch_name == "Qwen3ForCausalLM") {
    c.arch = Architecture::qwen3;
  } else {
    return unimplemented(std::string(source) + ": architecture '" +
                         (arch_name.empty() ? std::string("(none)") : arch_name) +
                         "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                         "Qwen2ForCausalLM, Qwen3ForCausalLM)");
  }
  if (c.model_type.empty()) {
    static const char* types[] = {"llama", "mistral", "qwen2", "qwen3"};
    c.model_type = types[static_cast<int>(c.arch)];
  }

  if (auto it = j.find("hidden_act"); it != j.end() && !it->is_null()) {
    if (!it->is_string() ||
        (it->get<std::string>() != "silu" && it->get<std::string>() != "swish")) {
      return unimplemented(std::string(source) + ": hidden_act '" +
                           (it->is_string() ? it->get<std::string>() : it->dump()) +
                           "' is not supported (only silu)");
    }
  }

  VPOD_ASSIGN_OR_RETURN(c.vocab_size, get_int(j, source, "vocab_size", std::nullopt));
  VPOD_ASSIGN_OR_RETURN(c.hidden_size, get_int(j, source, "hidden_size", std::nullopt));
  VPOD_ASSIGN_OR_RETURN(c.intermediate_size, get_int(j, source, "intermediate_size", std::nullopt));
  VPOD_ASSIGN_OR_RETURN(c.num_layers, get_int(j, source, "num_hidden_layers", std::nullopt));
  VPOD_ASSIGN_OR_RETURN(c.num_q_heads, get_int(j, source, "num_attention_heads", std::nullopt));
  VPOD_ASSIGN_OR_RETURN(c.num_kv_heads, get_int(j, source, "num_key_value_heads", c.num_q_heads));
  if (c.num_q_heads % c.num_kv_heads != 0) {
    return field_error(source, "num_key_value_heads",
                       "must divide num_attention_heads (" + std::to_string(c.num_q_heads) + ")");
  }
  std::optional<int> default_head_dim;
  if (c.hidden_size % c.num_q_heads == 0) default_head_dim = c.hidden_size / c.num_q_heads;
  VPOD_ASSIGN_OR_RETURN(c.head_dim, get_int(j, source, "head_dim", default_head_dim));
  if (c.head_dim % 2 != 0) return field_error(source, "head_dim", "must be even (RoPE pairs)");
  VPOD_ASSIGN_OR_RETURN(double eps, get_number(j, source, "rms_norm_eps", 1e-6));
  if (!(eps > 0 && eps < 1)) return field_error(source, "rms_norm_eps", "must be in (0, 1)");
  c.rms_norm_eps = static_cast<float>(eps);
  VPOD_ASSIGN_OR_RETURN(double range, get_number(j, source, "initializer_range", 0.02));
  if (!(range > 0 && range < 1))
    return field_error(source, "initializer_range", "must be in (0, 1)");
  c.initializer_range = static_cast<float>(range);
  VPOD_ASSIGN_OR_RETURN(c.max_position_embeddings,
                        get_int(j, source, "max_position_embeddings", 4096));
  VPOD_RETURN_IF_ERROR(parse_rope(j, source, c.rope));

  // Sliding window: Mistral sets it (or null); Qwen2/3 carry one that only
  // applies with use_sliding_window=true.
  VPOD_ASSIGN_OR_RETURN(bool use_window,
                        get_bool(j, source, "use_sliding_window",
                                 c.arch == Architecture::mistral || c.arch == Architecture::llama));
  if (auto it = j.find("sliding_window"); use_window && it != j.end() && !it->is_null()) {
    VPOD_ASSIGN_OR_RETURN(int window, get_int(j, source, "sliding_window", std::nullopt));
    if (c.arch == Architecture::qwen2 || c.arch == Architecture::qwen3) {
      VPOD_ASSIGN_OR_RETURN(int max_window_layers,
                            get_int(j, source, "max_window_layers", c.num_layers, 0));
      if (max_window_layers < c.num_layers) {
        return unimplemented(std::string(source) +
                             ": sliding_window on only some layers (max_window_layers < "
                             "num_hidden_layers) is not supported");
      }
    }
    if (window < c.max_position_embeddings) c.sliding_window = window;
  }

  VPOD_ASSIGN_OR_RETURN(c.tie_word_embeddings, get_bool(j, source, "tie_word_embeddings", false));
  VPOD_ASSIGN_OR_RETURN(bool attention_bias, get_bool(j, source, "attention_bias", false));
  VPOD_ASSIGN_OR_RETURN(bool mlp_bias, get_bool(j, source, "mlp_bias", false));
  if (mlp_bias) return unimplemented(std::string(source) + ": mlp_bias=true is not supported");
  c.qkv_bias = attention_bias || c.arch == Architecture::qwen2;
  c.o_bias = attention_bias;
  c.qk_norm = c.arch == Architecture::qwen3;

  std::string dtype_text = "float32";  // transformers' default
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (auto it = j.find(key); it != j.end() && !it->is_null()) {
      if (!it->is_string()) return field_error(source, key, "must be a string");
      dtype_text = it->get<std::string>();
      break;
    }
  }
  Result<DType> dtype = parse_dtype(dtype_text);
  if (!dtype.ok()) return field_error(source, "torch_dtype", dtype.status().message());
  c.dtype = *dtype;

  VPOD_ASSIGN_OR_RETURN(c.bos_token_id, get_optional_token(j, source, "bos_token_id"));
  VPOD_ASSIGN_OR_RETURN(c.eos_token_ids, get_token_list(j, source, "eos_token_id"));
  for (int id : c.eos_token_ids) {
    if (id >= c.vocab_size) return field_error(source, "eos_token_id", "is >= vocab_size");
  }
  return c;
}

Result<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return not_found(path.string() + ": cannot read (" + ec.message() + ")");
  if (size > max_bytes) {
    return invalid_argument(path.string() + ": " + std::to_string(size) +
                            " bytes is larger than the limit of " + std::to_string(max_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<ModelConfig> load_model_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  VPOD_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_model_config(text, path.string());
}

Result<GenerationConfig> parse_generation_config(std::string_view json_text,
                                                 std::string_view source) {
  VPOD_ASSIGN_OR_RETURN(json j, parse_json_object(json_text, source));
  GenerationConfig g;
  VPOD_ASSIGN_OR_RETURN(g.eos_token_ids, get_token_list(j, source, "eos_token_id"));
  VPOD_ASSIGN_OR_RETURN(g.bos_token_id, get_optional_token(j, source, "bos_token_id"));
  VPOD_ASSIGN_OR_RETURN(g.do_sample, get_bool(j, source, "do_sample", false));
  auto opt_number = [&](const char* key, std::optional<float>& out, double lo,
                        double hi) -> Status {
    if (!j.contains(key) || j[key].is_null()) return {};
    VPOD_ASSIGN_OR_RETURN(double v, get_number(j, source, key, std::nullopt));
    if (!(v >= lo && v <= hi)) {
      return field_error(
          source, key, "is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    out = static_cast<float>(v);
    return {};
  };
  VPOD_RETURN_IF_ERROR(opt_number("temperature", g.temperature, 0.0, 100.0));
  VPOD_RETURN_IF_ERROR(opt_number("top_p", g.top_p, 0.0, 1.0));
  VPOD_RETURN_IF_ERROR(opt_number("min_p", g.min_p, 0.0, 1.0));
  VPOD_RETURN_IF_ERROR(opt_number("repetition_penalty", g.repetition_penalty, 1e-3, 100.0));
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    VPOD_ASSIGN_OR_RETURN(int k, get_int(j, source, "top_k", std::nullopt, 0));
    g.top_k = k;
  }
  if (j.contains("max_new_tokens") && !j["max_new_tokens"].is_null()) {
    VPOD_ASSIGN_OR_RETURN(int n, get_int(j, source, "max_new_tokens", std::nullopt, 1));
    g.max_new_tokens = n;
  }
  return g;
}

Result<GenerationConfig> load_generation_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return GenerationConfig{};
  VPOD_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_generation_config(text, path.string());
}

}  // namespace vpod::model
