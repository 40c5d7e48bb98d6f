// Parsing of POST /v1/responses (responses_request.h): the Responses fields
// are read here; the input items become chat messages, the function tools
// chat's tools, and with the sampling fields they go through
// parse_chat_request.
#include "server/responses_request.h"

#include <fmt/format.h>

#include <array>

#include "common/json_nesting.h"

namespace vpod::server {
namespace {

using json = nlohmann::ordered_json;

// Fields copied as they are into the chat request (OpenAI's, the vLLM
// sampling extensions vLLM's Responses endpoint also takes, and chat's
// logit_bias and structured_outputs, which vpod takes here too).
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
                                    "min_tokens",
                                    "logit_bias",
                                    "structured_outputs",
                                    "parallel_tool_calls"};

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

const json* given(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// A required non-empty string field of an input item.
ApiResult<std::string> item_string(const json& item, const char* name, const std::string& where) {
  const json* v = given(item, name);
  if (!v || !v->is_string() || v->get_ref<const std::string&>().empty()) {
    return field_error("input", fmt::format("'{}.{}' must be a non-empty string", where, name));
  }
  return v->get<std::string>();
}

// An easy or explicit message item -> a chat message.
ApiResult<json> parse_message(const json& item, const std::string& where) {
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

// A function_call item -> one entry of an assistant message's tool_calls.
// The arguments must be JSON: the chat path parses them for the template.
ApiResult<json> parse_function_call(const json& item, const std::string& where) {
  auto call_id = item_string(item, "call_id", where);
  if (!call_id.ok()) return call_id.error();
  auto name = item_string(item, "name", where);
  if (!name.ok()) return name.error();
  const json* arguments = given(item, "arguments");
  if (!arguments || !arguments->is_string() ||
      !json_nesting_within(arguments->get_ref<const std::string&>(),
                           RequestLimits{}.max_json_depth) ||
      !json::accept(arguments->get_ref<const std::string&>())) {
    return field_error("input",
                       fmt::format("'{}.arguments' must be a string holding JSON (the arguments "
                                   "the model wrote), nested at most {} deep",
                                   where, RequestLimits{}.max_json_depth));
  }
  return json{{"id", call_id.value()},
              {"type", "function"},
              {"function", {{"name", name.value()}, {"arguments", *arguments}}}};
}

// A function_call_output item -> a tool message answering call_id.
ApiResult<json> parse_function_call_output(const json& item, const std::string& where) {
  auto call_id = item_string(item, "call_id", where);
  if (!call_id.ok()) return call_id.error();
  const json* output = given(item, "output");
  json content;
  if (output && output->is_string()) {
    content = *output;
  } else if (output && output->is_array()) {
    content = json::array();
    for (std::size_t k = 0; k < output->size(); ++k) {
      const std::string part_where = fmt::format("{}.output[{}]", where, k);
      const json& part = (*output)[k];
      if (!part.is_object() || part.value("type", json()) != "input_text") {
        return field_error("input",
                           fmt::format("'{}' must be an input_text part (vpod takes no images or "
                                       "files)",
                                       part_where));
      }
      auto text = parse_part(part, part_where);
      if (!text.ok()) return text.error();
      content.push_back(std::move(text).value());
    }
  } else {
    return field_error(
        "input",
        fmt::format("'{}.output' must be a string or an array of input_text parts", where));
  }
  json message = {
      {"role", "tool"}, {"tool_call_id", call_id.value()}, {"content", std::move(content)}};
  if (const json* name = given(item, "name"); name && name->is_string()) message["name"] = *name;
  return message;
}

ApiResult<json> parse_input(const json& input) {
  if (input.is_string()) return json::array({{{"role", "user"}, {"content", input}}});
  if (!input.is_array()) {
    return field_error("input", "'input' must be a string or an array of input items");
  }
  if (input.empty()) return field_error("input", "'input' must not be empty");
  json messages = json::array();
  for (std::size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) {
      return field_error("input", fmt::format("'{}' must be an object", where));
    }
    std::string type = "message";
    if (auto t = item.find("type"); t != item.end() && !t->is_null()) {
      if (!t->is_string())
        return field_error("input", fmt::format("'{}.type' must be a string", where));
      type = t->get<std::string>();
    }
    if (type == "message") {
      auto m = parse_message(item, where);
      if (!m.ok()) return m.error();
      messages.push_back(std::move(m).value());
    } else if (type == "function_call") {
      auto call = parse_function_call(item, where);
      if (!call.ok()) return call.error();
      // One assistant turn: the calls made together, after its text if any.
      if (messages.empty() || messages.back()["role"] != "assistant") {
        messages.push_back({{"role", "assistant"}, {"content", ""}});
      }
      messages.back()["tool_calls"].push_back(std::move(call).value());
    } else if (type == "function_call_output") {
      auto m = parse_function_call_output(item, where);
      if (!m.ok()) return m.error();
      messages.push_back(std::move(m).value());
    } else {
      return field_error("input", fmt::format("'{}.type' '{}' is not supported by vpod (only "
                                              "message, function_call and function_call_output "
                                              "items)",
                                              where, type));
    }
  }
  return messages;
}

// tools: the function tools in chat's shape; `echo` gets them in the
// Responses shape. Another tool type is a 400 naming it.
ApiResult<json> parse_tools(const json& tools, nlohmann::json& echo) {
  if (!tools.is_array()) return field_error("tools", "'tools' must be an array");
  json chat_tools = json::array();
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!tool.is_object() || !tool.contains("type") || !tool["type"].is_string()) {
      return field_error("tools",
                         fmt::format("'{}' must be an object with a string 'type'", where));
    }
    const std::string type = tool["type"].get<std::string>();
    if (type != "function") {
      return not_supported("tools",
                           fmt::format("'{}.type' is '{}'; only 'function' tools", where, type));
    }
    const json* name = given(tool, "name");
    if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      return field_error("tools", fmt::format("'{}.name' must be a non-empty string", where));
    }
    json function = {{"name", *name}};
    nlohmann::json echoed = {{"type", "function"}, {"name", *name}};
    for (const char* key : {"description", "parameters", "strict"}) {
      const json* v = given(tool, key);
      if (v) function[key] = *v;
      echoed[key] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    }
    // description, parameters and strict are checked in the chat shape
    // (tool_request.h); parse_responses_request renames its errors.
    chat_tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    echo.push_back(std::move(echoed));
  }
  return chat_tools;
}

// tool_choice in chat's shape; `echo` gets the Responses one.
ApiResult<json> parse_tool_choice(const json& choice, nlohmann::json& echo) {
  if (choice.is_string()) {
    if (choice != "none" && choice != "auto" && choice != "required") {
      return field_error("tool_choice",
                         fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                     "{{\"type\": \"function\", \"name\"}}, got \"{}\"",
                                     choice.get<std::string>()));
    }
    echo = nlohmann::json(choice);
    return choice;
  }
  if (!choice.is_object()) {
    return field_error("tool_choice", "'tool_choice' must be a string or an object");
  }
  const json* type = given(choice, "type");
  if (!type || !type->is_string()) {
    return field_error("tool_choice", "'tool_choice.type' must be a string");
  }
  if (*type != "function") {
    return not_supported("tool_choice", fmt::format("type '{}'; only {{\"type\": \"function\", "
                                                    "\"name\"}}",
                                                    type->get<std::string>()));
  }
  const json* name = given(choice, "name");
  if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return field_error("tool_choice", "'tool_choice.name' must be a non-empty string");
  }
  echo = {{"type", "function"}, {"name", nlohmann::json(*name)}};
  return json{{"type", "function"}, {"function", {{"name", *name}}}};
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
  if (given(body, "max_tool_calls")) {
    return not_supported("max_tool_calls", "use parallel_tool_calls: false for one call");
  }
  if (const json* text = given(body, "text")) {
    if (!text->is_object()) return field_error("text", "'text' must be an object");
    if (const json* verbosity = given(*text, "verbosity"); verbosity && *verbosity != "medium") {
      return not_supported("text.verbosity", "only \"medium\"");
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

// text.format (structured output) -> chat's response_format, whose parser
// validates it: {type: "text" | "json_object"} as they are;
// {type: "json_schema", name, schema, description?, strict?} nests under
// "json_schema". `echo` gets the format as the response object shows it.
ApiResult<json> parse_text_format(const json& text, nlohmann::json& echo) {
  const json* format = given(text, "format");
  if (format == nullptr) return json(nullptr);
  if (!format->is_object() || !format->contains("type") || !(*format)["type"].is_string()) {
    return field_error("text.format", "'text.format' must be an object with a string 'type'");
  }
  const std::string type = (*format)["type"].get<std::string>();
  if (type == "text" || type == "json_object") {
    echo = nlohmann::json{{"type", type}};
    return json{{"type", type}};
  }
  if (type != "json_schema") {
    return field_error("text.format", fmt::format("'text.format.type' must be one of text, "
                                                  "json_object, json_schema (got '{}')",
                                                  type));
  }
  json nested = json::object();
  for (const char* name : {"name", "schema", "description", "strict"}) {
    if (auto it = format->find(name); it != format->end()) nested[name] = *it;
  }
  echo = nlohmann::json(*format);
  if (!echo.contains("strict")) echo["strict"] = false;
  return json{{"type", "json_schema"}, {"json_schema", std::move(nested)}};
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
  if (const json* tools = given(j, "tools")) {
    auto chat_tools = parse_tools(*tools, r.tools_echo);
    if (!chat_tools.ok()) return chat_tools.error();
    chat["tools"] = std::move(chat_tools).value();
  }
  if (const json* choice = given(j, "tool_choice")) {
    auto chat_choice = parse_tool_choice(*choice, r.tool_choice_echo);
    if (!chat_choice.ok()) return chat_choice.error();
    chat["tool_choice"] = std::move(chat_choice).value();
  }
  if (const json* text = given(j, "text")) {
    auto format = parse_text_format(*text, r.text_format_echo);
    if (!format.ok()) return format.error();
    if (!format.value().is_null()) {
      if (given(j, "response_format") || given(j, "structured_outputs")) {
        return field_error("text.format",
                           "give 'text.format' or vpod's 'structured_outputs', not both");
      }
      chat["response_format"] = std::move(format).value();
    }
  }
  chat["messages"] = std::move(messages).value();
  if (r.max_output_tokens) chat["max_tokens"] = *r.max_output_tokens;
  auto chat_request = parse_chat_request(chat.dump(), limits);
  if (!chat_request.ok()) {
    // The chat path names the messages, and the tools in its nested shape;
    // here they are the input, and flat tools.
    ApiError e = chat_request.error();
    if (e.param == "messages") e.param = "input";
    // response_format is text.format here, with json_schema's fields flat.
    if (e.param.rfind("response_format", 0) == 0) {
      e.param = "text.format";
      for (const char* from : {"response_format.json_schema.", "response_format."}) {
        for (std::size_t at; (at = e.message.find(from)) != std::string::npos;) {
          e.message.replace(at, std::string_view(from).size(), "text.format.");
        }
      }
    }
    if (e.param.rfind("tools[", 0) == 0) {
      e.param = "tools";
      for (std::size_t at; (at = e.message.find(".function.")) != std::string::npos;) {
        e.message.replace(at, 10, ".");
      }
    }
    return e;
  }
  r.chat = std::move(chat_request).value();
  return r;
}

}  // namespace vpod::server
