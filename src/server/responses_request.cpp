// Parsing of POST /v1/responses (responses_request.h): the Responses fields
// are read here; the input becomes chat messages and, with the sampling
// fields, goes through parse_chat_request.
#include "server/responses_request.h"

#include <fmt/format.h>

#include <array>

namespace vpod::server {
namespace {

using json = nlohmann::ordered_json;

// Fields copied as they are into the chat request (OpenAI's, and the vLLM
// sampling extensions vLLM's Responses endpoint also takes).
constexpr std::array kChatFields = {"model",
                                    "temperature",
                                    "top_p",
                                    "stream",
                                    "top_k",
                                    "min_p",
                                    "seed",
                                    "stop",
                                    "presence_penalty",
                                    "frequency_penalty",
                                    "repetition_penalty",
                                    "cache_salt",
                                    "chat_template_kwargs",
                                    "ignore_eos",
                                    "min_tokens"};

ApiError field_error(const std::string& param, std::string message) {
  return bad_request(std::move(message), param);
}

ApiError not_supported(const std::string& param, std::string_view what) {
  return bad_request(fmt::format("'{}' is not supported by vpod's Responses API ({})", param, what),
                     param);
}

// One content part -> {"type": "text", "text"}.
ApiResult<json> parse_part(const json& part, const std::string& where) {
  if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
    return field_error("input", fmt::format("'{}' must be an object with a string 'type'", where));
  }
  const std::string type = part["type"].get<std::string>();
  if (type != "input_text" && type != "output_text") {
    return field_error("input", fmt::format("'{}.type' '{}' is not supported by vpod (only "
                                            "input_text and output_text)",
                                            where, type));
  }
  if (!part.contains("text") || !part["text"].is_string()) {
    return field_error("input", fmt::format("'{}.text' must be a string", where));
  }
  return json{{"type", "text"}, {"text", part["text"]}};
}

// One input item (an easy or explicit message) -> a chat message.
ApiResult<json> parse_item(const json& item, const std::string& where) {
  if (!item.is_object()) return field_error("input", fmt::format("'{}' must be an object", where));
  if (auto type = item.find("type"); type != item.end() && !type->is_null()) {
    if (!type->is_string() || *type != "message") {
      return field_error("input", fmt::format("'{}.type' {} is not supported by vpod (only "
                                              "'message' items)",
                                              where, type->dump()));
    }
  }
  auto role = item.find("role");
  static constexpr std::array kRoles = {"user", "assistant", "system", "developer"};
  bool known = false;
  if (role != item.end() && role->is_string()) {
    for (const char* r : kRoles) known = known || *role == r;
  }
  if (!known) {
    return field_error(
        "input", fmt::format("'{}.role' must be one of user, assistant, system, developer", where));
  }
  json message = {{"role", *role}};
  auto content = item.find("content");
  if (content == item.end() || !(content->is_string() || content->is_array())) {
    return field_error("input", fmt::format("'{}.content' must be a string or an array of "
                                            "input_text / output_text parts",
                                            where));
  }
  if (content->is_string()) {
    message["content"] = *content;
  } else {
    json parts = json::array();
    for (std::size_t k = 0; k < content->size(); ++k) {
      auto part = parse_part((*content)[k], fmt::format("{}.content[{}]", where, k));
      if (!part.ok()) return part.error();
      parts.push_back(std::move(part).value());
    }
    message["content"] = std::move(parts);
  }
  return message;
}

ApiResult<json> parse_input(const json& input) {
  if (input.is_string()) return json::array({{{"role", "user"}, {"content", input}}});
  if (!input.is_array()) {
    return field_error("input", "'input' must be a string or an array of message items");
  }
  if (input.empty()) return field_error("input", "'input' must not be empty");
  json messages = json::array();
  for (std::size_t i = 0; i < input.size(); ++i) {
    auto m = parse_item(input[i], fmt::format("input[{}]", i));
    if (!m.ok()) return m.error();
    messages.push_back(std::move(m).value());
  }
  return messages;
}

const json* given(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

ApiResult<std::optional<std::string>> optional_string(const json& body, const char* name) {
  const json* v = given(body, name);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return field_error(name, fmt::format("'{}' must be a string", name));
  return std::optional<std::string>(v->get<std::string>());
}

// The features vpod does not implement: a 400 naming the field when one is
// asked for, and silence when it is given at its neutral value.
std::optional<ApiError> check_unsupported(const json& body) {
  if (const json* tools = given(body, "tools"); tools && !(tools->is_array() && tools->empty())) {
    return not_supported("tools", "no tool calling yet");
  }
  if (const json* choice = given(body, "tool_choice");
      choice && *choice != "none" && *choice != "auto") {
    return not_supported("tool_choice", "no tool calling yet");
  }
  if (const json* text = given(body, "text")) {
    if (!text->is_object()) return field_error("text", "'text' must be an object");
    if (const json* format = given(*text, "format")) {
      if (!format->is_object() || format->value("type", json()) != "text") {
        return not_supported("text.format", "only {\"type\": \"text\"}");
      }
    }
  }
  if (given(body, "reasoning")) return not_supported("reasoning", "no reasoning models");
  if (const json* include = given(body, "include");
      include && !(include->is_array() && include->empty())) {
    return not_supported("include", "no extra output data");
  }
  if (const json* truncation = given(body, "truncation"); truncation && *truncation != "disabled") {
    return not_supported("truncation",
                         "only \"disabled\": a conversation that does not fit is "
                         "a 400");
  }
  if (const json* background = given(body, "background"); background && *background != false) {
    return not_supported("background", "requests run in the foreground");
  }
  if (given(body, "prompt")) return not_supported("prompt", "no stored prompt templates");
  if (given(body, "conversation")) {
    return not_supported("conversation", "use previous_response_id");
  }
  if (given(body, "top_logprobs")) return not_supported("top_logprobs", "no logprobs yet");
  return std::nullopt;
}

}  // namespace

ApiResult<ResponsesRequest> parse_responses_request(std::string_view body,
                                                    const RequestLimits& limits) {
  auto parsed = parse_request_object(body, limits);
  if (!parsed.ok()) return parsed.error();
  const json& j = parsed.value();
  if (auto e = check_unsupported(j)) return *e;

  ResponsesRequest r;
  const json* input = given(j, "input");
  if (!input) return field_error("input", "'input' is required");
  auto messages = parse_input(*input);
  if (!messages.ok()) return messages.error();

  auto instructions = optional_string(j, "instructions");
  if (!instructions.ok()) return instructions.error();
  r.instructions = std::move(instructions).value();
  auto previous = optional_string(j, "previous_response_id");
  if (!previous.ok()) return previous.error();
  r.previous_response_id = std::move(previous).value();
  auto user = optional_string(j, "user");
  if (!user.ok()) return user.error();
  r.user = std::move(user).value();

  if (const json* max = given(j, "max_output_tokens")) {
    if (!max->is_number_integer() || *max < 1 || *max > limits.max_model_len) {
      return field_error(
          "max_output_tokens",
          fmt::format("'max_output_tokens' must be an integer in [1, {}]", limits.max_model_len));
    }
    r.max_output_tokens = max->get<int>();
  }
  if (const json* store = given(j, "store")) {
    if (!store->is_boolean()) return field_error("store", "'store' must be a boolean");
    r.store = store->get<bool>();
  }
  if (const json* metadata = given(j, "metadata")) {
    if (!metadata->is_object()) return field_error("metadata", "'metadata' must be an object");
    for (const auto& [key, value] : metadata->items()) {
      if (!value.is_string()) {
        return field_error("metadata", fmt::format("'metadata.{}' must be a string", key));
      }
      r.metadata[key] = value.get<std::string>();
    }
  }

  json chat = json::object();
  for (const char* name : kChatFields) {
    if (auto it = j.find(name); it != j.end()) chat[name] = *it;
  }
  chat["messages"] = std::move(messages).value();
  if (r.max_output_tokens) chat["max_tokens"] = *r.max_output_tokens;
  auto chat_request = parse_chat_request(chat.dump(), limits);
  if (!chat_request.ok()) return chat_request.error();
  r.chat = std::move(chat_request).value();
  return r;
}

}  // namespace vpod::server
