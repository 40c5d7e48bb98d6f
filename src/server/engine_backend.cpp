// EngineBackend: the HTTP side's adapter over engine::EngineStack.
#include "server/engine_backend.h"

#include <ctime>

#include "engine/engine.h"
#include "model/model.h"
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
  // The chat template first: a folder without a usable one fails before the
  // model loads.
  VPOD_ASSIGN_OR_RETURN(tokenizer::ChatTemplate tmpl, tokenizer::ChatTemplate::load(dir));
  s->chat_template = std::make_unique<tokenizer::ChatTemplate>(std::move(tmpl));
  s->template_budget = std::make_unique<tokenizer::jinja::RenderBudget>(o.template_memory_bytes);
  engine::StackOptions stack_options = o.stack;
  stack_options.load_tokenizer = true;
  VPOD_ASSIGN_OR_RETURN(s->engine, engine::EngineStack::build(stack_options));
  s->tokenizer = s->engine->tokenizer();

  s->card.id = o.served_model_name.empty() ? dir.string() : o.served_model_name;
  s->card.root = dir.string();
  s->card.created = static_cast<std::int64_t>(std::time(nullptr));
  s->card.max_model_len = s->engine->max_model_len();
  s->card.vocab_size = s->engine->model().config().vocab_size;
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
