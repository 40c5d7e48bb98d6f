// ServingBackend over an engine::EngineStack (the composition root, which
// builds model, KV cache and engine from the typed options): this adapter
// adds only what HTTP needs - the model card, the chat template and the
// memory budget all concurrent template renders share. `vpod serve` builds
// one from its flags. Destruction stops the engine first (unfinished requests
// end with "abort").
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_stack.h"
#include "server/backend.h"

namespace vpod::server {

struct EngineBackendOptions {
  engine::StackOptions stack;
  // Every name clients may give in `model`; the first is reported. Empty:
  // the --model value as given (vLLM's default).
  std::vector<std::string> served_model_names;
  // --tokenizer: the tokenizer files (and chat template) from another folder.
  std::filesystem::path tokenizer_dir;  // empty: the model folder
  // --chat-template: a file or an inline template (resolve_chat_template);
  // empty: the tokenizer folder's.
  std::string chat_template;
  // --generation-config: auto | vllm | a folder (default_sampling_params).
  std::string generation_config = "auto";
  int max_logprobs = 20;  // --max-logprobs
  // --enable-auto-tool-choice, --tool-call-parser NAME, --reasoning-parser
  // NAME (vLLM's names; "": none).
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  std::string reasoning_parser;
  // Memory all concurrent chat-template renders may use together (each
  // render also has its own limit).
  std::size_t template_memory_bytes = std::size_t{1} << 30;
};

class EngineBackend final : public ServingBackend {
 public:
  // Loads everything and starts the engine loop; a Status naming the step
  // that failed otherwise (bad folder, unsupported mode, out of memory).
  static Result<std::unique_ptr<EngineBackend>> load(const EngineBackendOptions& options);
  ~EngineBackend() override;
  EngineBackend(const EngineBackend&) = delete;
  EngineBackend& operator=(const EngineBackend&) = delete;

  // One line about what was loaded (backend, model, KV budget), for the log.
  const std::string& summary() const;

  const ModelCard& model() const override;
  bool ready() const override { return true; }
  Result<std::vector<std::int32_t>> tokenize(std::string_view text,
                                             bool add_special_tokens) const override;
  Result<std::string> detokenize(std::span<const std::int32_t> token_ids,
                                 bool skip_special_tokens) const override;
  std::string token_bytes(std::int32_t token) const override;
  Result<std::string> apply_chat_template(const nlohmann::ordered_json& messages,
                                          const ChatTemplateOptions& options) const override;
  Result<std::unique_ptr<GenerationStream>> submit(engine::RequestSpec spec,
                                                   std::function<void()> wake) override;
  engine::MetricsSnapshot metrics() const override;

 private:
  struct Stack;
  explicit EngineBackend(std::unique_ptr<Stack> stack);
  std::unique_ptr<Stack> stack_;
};

}  // namespace vpod::server
