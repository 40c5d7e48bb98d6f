// parse_structured_output (structured_output_parse.h).
#include "server/structured_output_parse.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

namespace vpod::server {
namespace {

using json = nlohmann::ordered_json;
using grammar::Constraint;
using grammar::ConstraintKind;

// One constraint found in the body, with the field it came from.
struct Found {
  std::string field;
  Constraint constraint;
};

// A JSON Schema given as an object (or a boolean), or as a string holding
// one (vLLM accepts both for guided_json / structured_outputs.json).
ApiResult<std::string> schema_text(const json& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    json parsed = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
      return bad_request(fmt::format("'{}' must hold a JSON Schema object", field), field);
    return parsed.dump();
  }
  return bad_request(fmt::format("'{}' must be a JSON Schema object", field), field);
}

ApiResult<std::string> nonempty_string(const json& v, const std::string& field) {
  if (!v.is_string() || v.get<std::string>().empty())
    return bad_request(fmt::format("'{}' must be a non-empty string", field), field);
  return v.get<std::string>();
}

// choice: a non-empty list of strings, kept as its JSON text.
ApiResult<std::string> choice_text(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty())
    return bad_request(fmt::format("'{}' must be a non-empty array of strings", field), field);
  for (const json& c : v) {
    if (!c.is_string() || c.get<std::string>().empty())
      return bad_request(fmt::format("'{}' must hold only non-empty strings", field), field);
  }
  return v.dump();
}

// structural_tag: vLLM takes a JSON string or an object.
ApiResult<std::string> structural_tag_text(const json& v, const std::string& field) {
  if (v.is_object()) return v.dump();
  if (v.is_string()) {
    json parsed = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object())
      return bad_request(fmt::format("'{}' must be a JSON object", field), field);
    return parsed.dump();
  }
  return bad_request(fmt::format("'{}' must be a JSON object", field), field);
}

// How to read one kind's value; json_object takes a boolean (true: on).
ApiResult<std::optional<Constraint>> read_kind(ConstraintKind kind, const json& v,
                                               const std::string& field) {
  auto make = [&](ApiResult<std::string> spec,
                  bool strict = true) -> ApiResult<std::optional<Constraint>> {
    if (!spec.ok()) return spec.error();
    return std::optional<Constraint>(Constraint{kind, std::move(spec).value(), strict});
  };
  switch (kind) {
    case ConstraintKind::json_schema: return make(schema_text(v, field));
    case ConstraintKind::regex: return make(nonempty_string(v, field));
    case ConstraintKind::choice: return make(choice_text(v, field));
    case ConstraintKind::ebnf: return make(nonempty_string(v, field));
    case ConstraintKind::structural_tag: return make(structural_tag_text(v, field));
    case ConstraintKind::json_object:
      if (!v.is_boolean()) return bad_request(fmt::format("'{}' must be a boolean", field), field);
      if (!v.get<bool>()) return std::optional<Constraint>();
      return std::optional<Constraint>(Constraint{kind, "", false});
    case ConstraintKind::none: break;
  }
  return std::optional<Constraint>();
}

struct KindField {
  const char* name;
  ConstraintKind kind;
};

// OpenAI's response_format.
ApiResult<std::optional<Constraint>> read_response_format(const json& v) {
  const std::string field = "response_format";
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    return bad_request("'response_format' must be an object with a string 'type'", field);
  const std::string type = v["type"].get<std::string>();
  if (type == "text") return std::optional<Constraint>();
  if (type == "json_object")
    return std::optional<Constraint>(Constraint{ConstraintKind::json_object, "", false});
  if (type == "json_schema") {
    const std::string where = "response_format.json_schema";
    if (!v.contains("json_schema") || !v["json_schema"].is_object())
      return bad_request("'response_format.json_schema' must be an object", where);
    const json& js = v["json_schema"];
    if (js.contains("name") && !js["name"].is_null() && !js["name"].is_string())
      return bad_request("'response_format.json_schema.name' must be a string", where + ".name");
    bool strict = false;  // OpenAI's default
    if (js.contains("strict") && !js["strict"].is_null()) {
      if (!js["strict"].is_boolean())
        return bad_request("'response_format.json_schema.strict' must be a boolean",
                           where + ".strict");
      strict = js["strict"].get<bool>();
    }
    if (!js.contains("schema") || js["schema"].is_null())
      return bad_request("'response_format.json_schema.schema' is required", where + ".schema");
    ApiResult<std::string> schema = schema_text(js["schema"], where + ".schema");
    if (!schema.ok()) return schema.error();
    return std::optional<Constraint>(
        Constraint{ConstraintKind::json_schema, std::move(schema).value(), strict});
  }
  if (type == "structural_tag") {
    return std::optional<Constraint>(Constraint{ConstraintKind::structural_tag, v.dump(), true});
  }
  return bad_request(fmt::format("'response_format.type' must be one of text, json_object, "
                                 "json_schema, structural_tag; got \"{}\"",
                                 type),
                     "response_format.type");
}

}  // namespace

ApiResult<Constraint> parse_structured_output(const json& body) {
  std::vector<Found> found;
  bool disable_any_whitespace = false;  // vLLM's structured_outputs.disable_any_whitespace
  auto add = [&](const std::string& field,
                 ApiResult<std::optional<Constraint>> c) -> std::optional<ApiError> {
    if (!c.ok()) return c.error();
    if (c.value()) found.push_back({field, std::move(*c.value())});
    return std::nullopt;
  };
  auto present = [&](const json& object, const char* name) -> const json* {
    auto it = object.find(name);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  };

  if (const json* rf = present(body, "response_format")) {
    if (auto e = add("response_format", read_response_format(*rf))) return *e;
  }
  // vLLM's current spelling.
  if (const json* so = present(body, "structured_outputs")) {
    if (!so->is_object())
      return bad_request("'structured_outputs' must be an object", "structured_outputs");
    static constexpr KindField kFields[] = {{"json", ConstraintKind::json_schema},
                                            {"regex", ConstraintKind::regex},
                                            {"choice", ConstraintKind::choice},
                                            {"grammar", ConstraintKind::ebnf},
                                            {"json_object", ConstraintKind::json_object},
                                            {"structural_tag", ConstraintKind::structural_tag}};
    for (const KindField& k : kFields) {
      const json* v = present(*so, k.name);
      if (!v) continue;
      const std::string field = std::string("structured_outputs.") + k.name;
      if (auto e = add(field, read_kind(k.kind, *v, field))) return *e;
    }
    // Options vpod's grammar engine does not offer: refused rather than ignored.
    for (const char* option : {"whitespace_pattern", "disable_additional_properties"}) {
      const json* v = present(*so, option);
      if (v && !(v->is_boolean() && !v->get<bool>()))
        return bad_request(fmt::format("'structured_outputs.{}' is not supported by vpod", option),
                           std::string("structured_outputs.") + option);
    }
    if (const json* v = present(*so, "disable_any_whitespace")) {
      if (!v->is_boolean()) {
        return bad_request("'structured_outputs.disable_any_whitespace' must be a boolean",
                           "structured_outputs.disable_any_whitespace");
      }
      disable_any_whitespace = v->get<bool>();
    }
  }
  // vLLM's older top-level spellings (still sent by many clients).
  static constexpr KindField kGuided[] = {{"guided_json", ConstraintKind::json_schema},
                                          {"guided_regex", ConstraintKind::regex},
                                          {"guided_choice", ConstraintKind::choice},
                                          {"guided_grammar", ConstraintKind::ebnf},
                                          {"structural_tag", ConstraintKind::structural_tag}};
  for (const KindField& k : kGuided) {
    if (const json* v = present(body, k.name)) {
      if (auto e = add(k.name, read_kind(k.kind, *v, k.name))) return *e;
    }
  }
  if (present(body, "guided_whitespace_pattern"))
    return bad_request("'guided_whitespace_pattern' is not supported by vpod",
                       "guided_whitespace_pattern");
  // guided_decoding_backend is ignored (one backend, xgrammar), as vLLM now does.

  if (found.empty()) {
    if (disable_any_whitespace) {
      return bad_request(
          "'structured_outputs.disable_any_whitespace' needs a JSON constraint "
          "(structured_outputs.json or json_object, response_format, guided_json)",
          "structured_outputs.disable_any_whitespace");
    }
    return Constraint{};
  }
  if (found.size() > 1) {
    return bad_request(fmt::format("only one structured output constraint may be given per "
                                   "request; got '{}' and '{}'",
                                   found[0].field, found[1].field),
                       found[1].field);
  }
  Constraint c = std::move(found[0].constraint);
  if (disable_any_whitespace) {
    if (c.kind != ConstraintKind::json_schema && c.kind != ConstraintKind::json_object) {
      return bad_request(
          "'structured_outputs.disable_any_whitespace' applies to JSON constraints only",
          "structured_outputs.disable_any_whitespace");
    }
    c.any_whitespace = false;
  }
  return c;
}

}  // namespace vpod::server
