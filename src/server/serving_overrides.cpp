// resolve_chat_template and default_sampling_params (serving_overrides.h).
#include "server/serving_overrides.h"

#include <fmt/format.h>

#include <system_error>

#include "model/model_config.h"

namespace vpod::server {

Result<std::string> resolve_chat_template(const std::string& value) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(value, ec)) return model::read_text_file(value);
  if (value.find_first_of("{}\n") != std::string::npos) return value;
  return invalid_argument(
      fmt::format("--chat-template {}: no such file (an inline template holds '{{', '}}' or a "
                  "newline)",
                  value));
}

Result<engine::SamplingParams> default_sampling_params(const std::string& generation_config,
                                                       const std::filesystem::path& model_dir,
                                                       std::string* taken) {
  engine::SamplingParams d;
  if (taken != nullptr) taken->clear();
  if (generation_config == "vllm") return d;
  std::filesystem::path dir = model_dir;
  if (generation_config != "auto") {
    dir = generation_config;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(dir / "generation_config.json", ec)) {
      return invalid_argument(fmt::format(
          "--generation-config {}: no generation_config.json there (or give auto or vllm)",
          generation_config));
    }
  }
  VPOD_ASSIGN_OR_RETURN(const model::GenerationConfig g, model::load_generation_config(dir));
  std::string names;
  const auto take = [&](const char* name, const auto& field, auto transformers_default,
                        auto& into) {
    if (!field || *field == transformers_default) return;
    into = *field;
    names += fmt::format("{}{}={}", names.empty() ? "" : ", ", name, *field);
  };
  take("temperature", g.temperature, 1.0f, d.temperature);
  take("top_p", g.top_p, 1.0f, d.top_p);
  take("top_k", g.top_k, 50, d.top_k);
  take("min_p", g.min_p, -1.0f, d.min_p);  // transformers has no min_p default
  take("repetition_penalty", g.repetition_penalty, 1.0f, d.repetition_penalty);
  if (taken != nullptr) *taken = std::move(names);
  return d;
}

}  // namespace vpod::server
