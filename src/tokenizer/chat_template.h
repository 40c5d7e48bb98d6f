// Chat templates from a model's tokenizer_config.json, rendered with Hugging
// Face's semantics: the Jinja template sees messages, add_generation_prompt,
// tools, documents, the special tokens (bos_token, eos_token, ...) and any
// extra variables (enable_thinking, date_string, ...), exactly as
// transformers' apply_chat_template passes them.
//
// JSON values are nlohmann::ordered_json: key order is visible to templates
// (tojson of a tool schema), and transformers keeps the request's order.
//
// Message content may be a string or a list of parts ([{"type": "text",
// "text": ...}]). Like vLLM, we look at the template once: if it iterates
// over a message's content (it expects parts), parts are passed as they are;
// otherwise text parts are joined with "\n" into one string, so templates
// written for strings work. Non-text parts are refused (text-only models).
#pragma once

#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tokenizer/jinja/template.h"

namespace vpod::tokenizer {

struct ChatRenderOptions {
  nlohmann::ordered_json tools;      // an array of tool schemas, or null (templates see tools=None)
  nlohmann::ordered_json documents;  // for RAG templates, or null
  // More template variables (vLLM's chat_template_kwargs): enable_thinking,
  // date_string, ... They may override the special tokens but not messages,
  // add_generation_prompt, tools or documents.
  nlohmann::ordered_json extra_vars = nlohmann::ordered_json::object();
  // Leave the final (assistant) message open so the model continues it,
  // cutting the rendering right after its text as transformers does.
  bool continue_final_message = false;
  // The time strftime_now() sees; the clock when unset.
  std::optional<std::time_t> now;
  jinja::RenderLimits limits;
};

class ChatTemplate {
 public:
  // Reads `model_dir`/tokenizer_config.json (its chat_template, special
  // tokens), preferring `model_dir`/chat_template.jinja for the template when
  // present, as newer transformers versions save it. A model without a
  // template loads; render() then explains that chat is unavailable.
  static Result<ChatTemplate> load(const std::filesystem::path& model_dir);

  // From a parsed tokenizer_config.json. chat_template is a string, or a
  // list of {"name", "template"} objects ("default" is used, and "tool_use"
  // when tools are given and it exists).
  static Result<ChatTemplate> from_config(const nlohmann::ordered_json& tokenizer_config);

  bool has_template() const { return !templates_.empty(); }

  // Renders a conversation: `messages` is an array of {"role", "content",
  // ...} objects (extra fields such as tool_calls pass through).
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const ChatRenderOptions& options = {}) const;

  // Whether the template used for `with_tools` takes content as a list of
  // parts (see the header comment).
  bool takes_content_parts(bool with_tools = false) const;

  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }

 private:
  struct Named {
    jinja::Template tmpl;
    bool takes_content_parts;
  };
  const Named* choose(bool with_tools) const;

  std::map<std::string, Named> templates_;  // by name; a plain string template is "default"
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
  // transformers' special_tokens_map: the special tokens that are set.
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace vpod::tokenizer
