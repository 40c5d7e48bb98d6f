// Chat templates (chat_template.h): loading them from tokenizer_config.json
// (named templates, special tokens), choosing one, and rendering a conversation.

#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "tokenizer/jinja/pystr.h"

namespace vpod::tokenizer {

namespace {

constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

// A special token in tokenizer_config.json: a string, or an AddedToken
// object {"content": ...}; null or absent means unset.
Result<std::optional<std::string>> read_token(const nlohmann::ordered_json& config,
                                              const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) {
      return std::optional<std::string>(content->get<std::string>());
    }
  }
  return invalid_argument(std::string(key) +
                          " must be a string or an object with a string content");
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return data_loss("cannot read " + path.string());
  return buffer.str();
}

// vLLM's "string" content format: text parts joined with newlines.
Result<nlohmann::ordered_json> join_text_parts(const nlohmann::ordered_json& parts, size_t index) {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& part = parts[i];
    const std::string where =
        "messages[" + std::to_string(index) + "].content[" + std::to_string(i) + "]";
    if (!part.is_object()) return invalid_argument(where + " must be an object");
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return invalid_argument(where + " must have a string \"type\"");
    }
    if (*type != "text") {
      return invalid_argument(where + " has type \"" + type->get<std::string>() +
                              "\"; only text parts are supported (text-only model)");
    }
    const auto t = part.find("text");
    if (t == part.end() || !t->is_string()) {
      return invalid_argument(where + " must have a string \"text\"");
    }
    if (i) text += '\n';
    text += t->get_ref<const std::string&>();
  }
  return nlohmann::ordered_json(std::move(text));
}

// transformers' continue_final_message: cut the rendering right after the
// final message's text, so the model continues it.
Result<std::string> cut_after_final_message(std::string rendered,
                                            const nlohmann::ordered_json& final) {
  std::string text;
  if (final.is_string()) {
    text = final.get<std::string>();
  } else if (final.is_array()) {
    bool found = false;
    for (auto it = final.rbegin(); it != final.rend() && !found; ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        text = (*it)["text"].get<std::string>();
        found = true;
      }
    }
    if (!found) {
      return invalid_argument(
          "continue_final_message is set but the final message has no text to continue");
    }
  } else {
    return invalid_argument("continue_final_message is set but the final message has no content");
  }
  namespace pystr = jinja::pystr;
  const std::string stripped = pystr::strip(text, std::nullopt, true, true);
  const size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos) {
    return invalid_argument(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template");
  }
  // transformers compares rendered[loc:loc + len(text.lstrip())] with the
  // text: equal only when the text has no leading whitespace and the template
  // kept its trailing whitespace; then the cut keeps that whitespace.
  const std::string lstripped = pystr::strip(text, std::nullopt, true, false);
  const bool kept_spacing =
      lstripped.size() == text.size() && rendered.compare(loc, text.size(), text) == 0;
  rendered.resize(loc + (kept_spacing ? text.size() : stripped.size()));
  return rendered;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_config(const nlohmann::ordered_json& config) {
  if (!config.is_object()) return invalid_argument("tokenizer_config.json must be a JSON object");
  ChatTemplate out;
  for (const char* key : kSpecialTokenKeys) {
    VPOD_ASSIGN_OR_RETURN(std::optional<std::string> token, read_token(config, key));
    if (token) out.special_tokens_[key] = *token;
    if (std::string_view(key) == "bos_token") out.bos_token_ = token;
    if (std::string_view(key) == "eos_token") out.eos_token_ = token;
  }
  if (const auto extra = config.find("additional_special_tokens");
      extra != config.end() && extra->is_array() && !extra->empty()) {
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
    for (const auto& t : *extra) {
      if (t.is_string()) {
        tokens.push_back(t);
      } else if (t.is_object() && t.contains("content") && t["content"].is_string()) {
        tokens.push_back(t["content"]);
      } else {
        return invalid_argument("additional_special_tokens entries must be strings or objects");
      }
    }
    out.special_tokens_["additional_special_tokens"] = std::move(tokens);
  }

  std::map<std::string, std::string> sources;
  const auto ct = config.find("chat_template");
  if (ct == config.end() || ct->is_null()) {
    // No template: render() reports it.
  } else if (ct->is_string()) {
    sources["default"] = ct->get<std::string>();
  } else if (ct->is_array()) {
    for (const auto& entry : *ct) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string()) {
        return invalid_argument(
            "chat_template list entries must be objects with string \"name\" and \"template\"");
      }
      sources[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
    }
    if (!sources.empty() && !sources.count("default")) {
      return invalid_argument("chat_template list has no template named \"default\"");
    }
  } else {
    return invalid_argument("chat_template must be a string or a list of named templates");
  }
  for (auto& [name, source] : sources) {
    auto parsed = jinja::Template::parse(source);
    if (!parsed.ok()) return parsed.status().with_context("chat template '" + name + "'");
    const bool parts = parsed->iterates_message_content();
    out.templates_.emplace(name, Named{std::move(parsed).value(), parts});
  }
  return out;
}

Result<ChatTemplate> ChatTemplate::load(const std::filesystem::path& model_dir) {
  const auto config_path = model_dir / "tokenizer_config.json";
  VPOD_ASSIGN_OR_RETURN(std::string text, read_file(config_path));
  nlohmann::ordered_json config =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return invalid_argument(config_path.string() + ": not valid JSON");
  const auto jinja_path = model_dir / "chat_template.jinja";
  std::error_code ec;
  if (std::filesystem::exists(jinja_path, ec) && config.is_object()) {
    VPOD_ASSIGN_OR_RETURN(std::string source, read_file(jinja_path));
    config["chat_template"] = std::move(source);
  }
  auto result = from_config(config);
  if (!result.ok()) return result.status().with_context(model_dir.string());
  return result;
}

const ChatTemplate::Named* ChatTemplate::choose(bool with_tools) const {
  if (with_tools) {
    if (const auto it = templates_.find("tool_use"); it != templates_.end()) return &it->second;
  }
  const auto it = templates_.find("default");
  return it == templates_.end() ? nullptr : &it->second;
}

bool ChatTemplate::takes_content_parts(bool with_tools) const {
  const Named* t = choose(with_tools);
  return t && t->takes_content_parts;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const ChatRenderOptions& options) const {
  const bool with_tools = !options.tools.is_null();
  const Named* t = choose(with_tools);
  if (!t) {
    return failed_precondition(
        "this model has no chat template (tokenizer_config.json has no chat_template), so chat "
        "requests cannot be served; use completions with a raw prompt instead");
  }
  if (!messages.is_array()) return invalid_argument("messages must be an array");
  if (options.continue_final_message && add_generation_prompt) {
    return invalid_argument(
        "continue_final_message and add_generation_prompt are not compatible: use "
        "continue_final_message to continue the final message, add_generation_prompt to start a "
        "new assistant turn");
  }
  if (options.continue_final_message && messages.empty()) {
    return invalid_argument("continue_final_message needs at least one message");
  }
  if (!options.extra_vars.is_object())
    return invalid_argument("extra template variables must be an object");

  nlohmann::ordered_json prepared = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object())
      return invalid_argument("messages[" + std::to_string(i) + "] must be an object");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return invalid_argument("messages[" + std::to_string(i) + "] must have a string \"role\"");
    }
    const auto content = m.find("content");
    if (content != m.end() && content->is_array() && !t->takes_content_parts) {
      nlohmann::ordered_json copy = m;
      VPOD_ASSIGN_OR_RETURN(copy["content"], join_text_parts(*content, i));
      prepared.push_back(std::move(copy));
    } else {
      prepared.push_back(m);
    }
  }

  // The variables transformers passes: messages, tools, documents,
  // add_generation_prompt, then the special tokens and the extra kwargs.
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  const nlohmann::ordered_json final_content =
      options.continue_final_message && !prepared.empty() && prepared.back().contains("content")
          ? prepared.back()["content"]
          : nlohmann::ordered_json();
  vars["messages"] = std::move(prepared);
  vars["tools"] = options.tools;
  vars["documents"] = options.documents;
  vars["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [key, value] : special_tokens_.items()) vars[key] = value;
  for (const auto& [key, value] : options.extra_vars.items()) {
    if (key == "messages" || key == "add_generation_prompt" || key == "tools" ||
        key == "documents") {
      return invalid_argument("extra template variable '" + key +
                              "' is reserved; pass it through its own field");
    }
    vars[key] = value;
  }

  jinja::RenderOptions render_options;
  render_options.limits = options.limits;
  render_options.now = options.now;
  // Errors pass through unprefixed: raise_exception() messages are written
  // for the user ("Conversation roles must alternate ..."), and the engine's
  // own errors already say "template error at line N".
  auto rendered = t->tmpl.render(vars, render_options);
  if (!rendered.ok() || !options.continue_final_message) return rendered;
  return cut_after_final_message(std::move(rendered).value(), final_content);
}

}  // namespace vpod::tokenizer
