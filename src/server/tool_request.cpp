// Tool requests (tool_request.h): validation of tools and tool_choice, and
// the schemas that enforce required and named choices.
#include "server/tool_request.h"

#include <fmt/format.h>

namespace vpod::server {
namespace {

using json = nlohmann::ordered_json;

ApiError bad_field(const std::string& field, std::string_view what) {
  return bad_request(fmt::format("'{}' {}", field, what), field);
}

// A field that is absent or null, or present with the wrong type.
const json* optional_field(const json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// One entry of `tools`: {"type": "function", "function": {"name",
// "description"?, "parameters"?, "strict"?}}.
std::optional<ApiError> check_tool(const json& tool, std::size_t i) {
  const std::string where = fmt::format("tools[{}]", i);
  if (!tool.is_object())
    return bad_field(where, fmt::format("must be an object, got {}", json_type_name(tool)));
  if (const json* type = optional_field(tool, "type"); type && *type != "function") {
    return bad_field(where + ".type", "must be 'function' (the only tool type vpod supports)");
  }
  const json* function = optional_field(tool, "function");
  if (!function) return bad_field(where + ".function", "is required");
  if (!function->is_object()) {
    return bad_field(where + ".function",
                     fmt::format("must be an object, got {}", json_type_name(*function)));
  }
  const json* name = optional_field(*function, "name");
  if (!name) return bad_field(where + ".function.name", "is required");
  if (!name->is_string() || name->get_ref<const std::string&>().empty()) {
    return bad_field(where + ".function.name", "must be a non-empty string");
  }
  if (const json* d = optional_field(*function, "description"); d && !d->is_string()) {
    return bad_field(where + ".function.description",
                     fmt::format("must be a string, got {}", json_type_name(*d)));
  }
  if (const json* p = optional_field(*function, "parameters"); p && !p->is_object()) {
    return bad_field(where + ".function.parameters",
                     fmt::format("must be a JSON Schema object, got {}", json_type_name(*p)));
  }
  if (const json* s = optional_field(*function, "strict"); s && !s->is_boolean()) {
    return bad_field(where + ".function.strict",
                     fmt::format("must be a boolean, got {}", json_type_name(*s)));
  }
  return std::nullopt;
}

const json* find_tool(const json& tools, const std::string& name) {
  for (const json& tool : tools) {
    if (tool["function"]["name"] == name) return &tool;
  }
  return nullptr;
}

// A tool's parameters schema; a function without one takes no arguments.
json parameters_of(const json& tool) {
  const json* p = optional_field(tool["function"], "parameters");
  if (p && !p->empty()) return *p;
  return {{"type", "object"}, {"properties", json::object()}};
}

}  // namespace

ApiResult<ToolRequest> parse_tool_request(const json& body) {
  ToolRequest r;
  const json* tools = optional_field(body, "tools");
  if (tools) {
    if (!tools->is_array()) {
      return bad_field("tools", fmt::format("must be an array, got {}", json_type_name(*tools)));
    }
    for (std::size_t i = 0; i < tools->size(); ++i) {
      if (auto e = check_tool((*tools)[i], i)) return *e;
    }
    r.tools = *tools;
  }
  if (const json* parallel = optional_field(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) {
      return bad_field("parallel_tool_calls",
                       fmt::format("must be a boolean, got {}", json_type_name(*parallel)));
    }
    r.parallel_tool_calls = parallel->get<bool>();
  }

  const bool has_tools = tools && !tools->empty();
  const json* choice = optional_field(body, "tool_choice");
  if (!choice) {
    r.choice = has_tools ? ToolChoice::automatic : ToolChoice::none;
    return r;
  }
  r.choice_given = true;
  if (*choice == "none") return r;
  if (!tools)
    return bad_field("tool_choice", "needs 'tools': when using tool_choice, tools must be set");
  if (choice->is_string()) {
    if (*choice == "auto") {
      r.choice = has_tools ? ToolChoice::automatic : ToolChoice::none;
    } else if (*choice == "required") {
      // OpenAI's behaviour: nothing to call is "none".
      r.choice = has_tools ? ToolChoice::required : ToolChoice::none;
    } else {
      return bad_field("tool_choice",
                       fmt::format("must be \"none\", \"auto\", \"required\" or a named function "
                                   "({{\"type\": \"function\", \"function\": {{\"name\": ...}}}}), "
                                   "got \"{}\"",
                                   choice->get_ref<const std::string&>()));
    }
    return r;
  }
  constexpr std::string_view kUsage =
      "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (!choice->is_object()) {
    return bad_field("tool_choice",
                     fmt::format("must be a string or an object, got {}", json_type_name(*choice)));
  }
  if (const json* type = optional_field(*choice, "type"); type && *type != "function") {
    return bad_field("tool_choice.type", fmt::format("must be 'function' ({})", kUsage));
  }
  const json* function = optional_field(*choice, "function");
  const json* name =
      function && function->is_object() ? optional_field(*function, "name") : nullptr;
  if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return bad_field("tool_choice.function.name",
                     fmt::format("must be a non-empty string ({})", kUsage));
  }
  r.function_name = name->get<std::string>();
  if (!find_tool(*tools, r.function_name)) {
    return bad_field("tool_choice",
                     fmt::format("names function '{}', which is not among the request's tools",
                                 r.function_name));
  }
  r.choice = ToolChoice::named;
  return r;
}

ApiResult<chat_output::ChatOutputConfig> chat_output_config(const ToolRequest& request,
                                                            const ToolServing& serving) {
  chat_output::ChatOutputConfig config;
  config.reasoning = serving.reasoning_parser;
  config.parser = serving.tool_parser;
  config.parallel_tool_calls = request.parallel_tool_calls;
  switch (request.choice) {
    case ToolChoice::none: break;
    case ToolChoice::automatic:
      if (!serving.enable_auto_tool_choice ||
          serving.tool_parser == chat_output::ToolParserKind::none) {
        return bad_request(
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
            "set (tools without tool_choice mean \"auto\")",
            request.choice_given ? "tool_choice" : "tools");
      }
      config.tools = chat_output::ToolMode::parse;
      break;
    case ToolChoice::required: config.tools = chat_output::ToolMode::required; break;
    case ToolChoice::named:
      config.tools = chat_output::ToolMode::named;
      config.function_name = request.function_name;
      break;
  }
  return config;
}

void adjust_stop_params(const chat_output::ChatOutputConfig& config, engine::StopParams& stop) {
  if (config.tools == chat_output::ToolMode::parse &&
      (config.parser == chat_output::ToolParserKind::hermes ||
       config.parser == chat_output::ToolParserKind::mistral)) {
    stop.skip_special_tokens = false;
  }
}

ApiResult<grammar::Constraint> tool_constraint(const ToolRequest& request) {
  grammar::Constraint c;
  if (request.choice == ToolChoice::named) {
    c.kind = grammar::ConstraintKind::json_schema;
    c.spec = parameters_of(*find_tool(request.tools, request.function_name)).dump();
    return c;
  }
  if (request.choice != ToolChoice::required) return c;
  json any_of = json::array();
  json defs = json::object();
  for (const json& tool : request.tools) {
    json parameters = parameters_of(tool);
    // "$ref": "#/$defs/X" resolves against the root: move the definitions there.
    if (auto d = parameters.find("$defs"); d != parameters.end() && d->is_object()) {
      for (const auto& [name, schema] : d->items()) {
        if (defs.contains(name) && defs[name] != schema) {
          return bad_request(
              fmt::format("Tool definition '{}' has multiple schemas, which is not supported",
                          name),
              "tools");
        }
        defs[name] = schema;
      }
      parameters.erase(d);
    }
    any_of.push_back(
        {{"properties",
          {{"name", {{"type", "string"}, {"enum", json::array({tool["function"]["name"]})}}},
           {"parameters", std::move(parameters)}}},
         {"required", json::array({"name", "parameters"})}});
  }
  json schema = {{"type", "array"},
                 {"minItems", 1},
                 {"items", {{"type", "object"}, {"anyOf", std::move(any_of)}}}};
  if (!request.parallel_tool_calls) schema["maxItems"] = 1;
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  c.kind = grammar::ConstraintKind::json_schema;
  c.spec = schema.dump();
  return c;
}

}  // namespace vpod::server
