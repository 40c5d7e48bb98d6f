// EngineBackend: the HTTP side's adapter over engine::EngineStack.
#include "server/engine_backend.h"

#include <fmt/format.h>

#include <ctime>

#include "common/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/model_config.h"
#include "server/serving_overrides.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vpod::server {
namespace {

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

// The tokenizer folder's chat template, or --chat-template's over its
// tokenizer_config.json (which still gives the special tokens).
Result<tokenizer::ChatTemplate> load_chat_template(const std::filesystem::path& tokenizer_dir,
                                                   const EngineBackendOptions& o) {
  if (o.chat_template.empty()) return tokenizer::ChatTemplate::load(tokenizer_dir);
  VPOD_ASSIGN_OR_RETURN(std::string text, resolve_chat_template(o.chat_template));
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const auto config_path = tokenizer_dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    VPOD_ASSIGN_OR_RETURN(std::string config_text, model::read_text_file(config_path));
    config = nlohmann::ordered_json::parse(config_text, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) return data_loss(config_path.string() + ": not a JSON object");
  }
  config["chat_template"] = std::move(text);
  auto tmpl = tokenizer::ChatTemplate::from_config(config);
  if (!tmpl.ok()) return tmpl.status().with_context("--chat-template");
  return tmpl;
}

// The tool-call and reasoning parser flags, checked as vLLM checks them.
Result<ToolServing> tool_serving(const EngineBackendOptions& o) {
  ToolServing t;
  t.enable_auto_tool_choice = o.enable_auto_tool_choice;
  if (!o.tool_call_parser.empty()) {
    auto kind = chat_output::tool_parser_from_name(o.tool_call_parser);
    if (!kind) {
      return invalid_argument(fmt::format("--tool-call-parser '{}' is not one of {}",
                                          o.tool_call_parser, chat_output::tool_parser_names()));
    }
    t.tool_parser = *kind;
  }
  if (t.enable_auto_tool_choice && t.tool_parser == chat_output::ToolParserKind::none) {
    return invalid_argument("--enable-auto-tool-choice requires --tool-call-parser");
  }
  if (!o.reasoning_parser.empty()) {
    auto kind = chat_output::reasoning_parser_from_name(o.reasoning_parser);
    if (!kind) {
      return invalid_argument(fmt::format("--reasoning-parser '{}' is not one of {}",
                                          o.reasoning_parser,
                                          chat_output::reasoning_parser_names()));
    }
    t.reasoning_parser = *kind;
  }
  return t;
}

}  // namespace

// What HTTP adds to the engine stack. The stack is declared last, so it (and
// its engine) goes first.
struct EngineBackend::Stack {
  ModelCard card;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template;
  // Every concurrent chat-template render draws from this one budget.
  std::unique_ptr<tokenizer::jinja::RenderBudget> template_budget;
  std::unique_ptr<engine::EngineStack> engine;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // the engine stack's
};

Result<std::unique_ptr<EngineBackend>> EngineBackend::load(const EngineBackendOptions& o) {
  auto s = std::make_unique<Stack>();
  const std::filesystem::path& dir = o.stack.model_dir;
  const std::filesystem::path& tokenizer_dir = o.tokenizer_dir.empty() ? dir : o.tokenizer_dir;
  if (o.max_logprobs < 0) return invalid_argument("--max-logprobs must be >= 0");
  VPOD_ASSIGN_OR_RETURN(s->card.tool_serving, tool_serving(o));
  // The chat template and the sampling defaults first: a bad flag or folder
  // fails before the model loads.
  VPOD_ASSIGN_OR_RETURN(tokenizer::ChatTemplate tmpl, load_chat_template(tokenizer_dir, o));
  s->chat_template = std::make_unique<tokenizer::ChatTemplate>(std::move(tmpl));
  s->template_budget = std::make_unique<tokenizer::jinja::RenderBudget>(o.template_memory_bytes);
  std::string taken;
  VPOD_ASSIGN_OR_RETURN(s->card.sampling_defaults,
                        default_sampling_params(o.generation_config, dir, &taken));
  if (!taken.empty()) {
    VPOD_LOG_INFO("default sampling parameters from generation_config.json: {}", taken);
  }
  engine::StackOptions stack_options = o.stack;
  stack_options.load_tokenizer = true;
  if (!o.tokenizer_dir.empty()) {
    VPOD_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok,
                          tokenizer::Tokenizer::from_file(o.tokenizer_dir));
    stack_options.tokenizer = std::make_shared<const tokenizer::Tokenizer>(std::move(tok));
  }
  VPOD_ASSIGN_OR_RETURN(s->engine, engine::EngineStack::build(stack_options));
  s->tokenizer = s->engine->tokenizer();

  if (o.served_model_names.empty()) {
    s->card.id = dir.string();
  } else {
    s->card.id = o.served_model_names.front();
    s->card.aliases.assign(o.served_model_names.begin() + 1, o.served_model_names.end());
  }
  s->card.max_logprobs = o.max_logprobs;
  s->card.root = dir.string();
  s->card.created = static_cast<std::int64_t>(std::time(nullptr));
  s->card.max_model_len = s->engine->max_model_len();
  s->card.vocab_size = s->engine->model().config().vocab_size;
  s->card.cache_config = {
      {"enable_prefix_caching", o.stack.prefix_caching ? "True" : "False"},
      {"gpu_memory_utilization", engine::prometheus_float(o.stack.gpu_memory_utilization)},
      {"kv_cache", std::string(engine::kv_cache_kind_name(o.stack.kv_cache))},
      {"kv_cache_memory_bytes", std::to_string(s->engine->kv_cache_bytes())}};
  return std::unique_ptr<EngineBackend>(new EngineBackend(std::move(s)));
}

EngineBackend::EngineBackend(std::unique_ptr<Stack> stack) : stack_(std::move(stack)) {}

EngineBackend::~EngineBackend() = default;  // the engine stack stops its engine first

const std::string& EngineBackend::summary() const { return stack_->engine->summary(); }
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
  render.tools = options.tools;
  render.continue_final_message = options.continue_final_message;
  render.limits.shared_budget = stack_->template_budget.get();
  return stack_->chat_template->render(messages, options.add_generation_prompt, render);
}

Result<std::unique_ptr<GenerationStream>> EngineBackend::submit(engine::RequestSpec spec,
                                                                std::function<void()> wake) {
  engine::Engine& engine = stack_->engine->engine();
  VPOD_ASSIGN_OR_RETURN(auto stream, engine.submit(std::move(spec), std::move(wake)));
  return std::unique_ptr<GenerationStream>(new EngineStream(engine, std::move(stream)));
}

engine::MetricsSnapshot EngineBackend::metrics() const {
  return stack_->engine->engine().metrics();
}

}  // namespace vpod::server
