// check_schema_supported (schema_check.h): walks every subschema.
#include "grammar/schema_check.h"

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace vpod::grammar {

namespace {

// Keywords xgrammar 0.2.8's converter ignores (json_schema_converter.cc warns
// "is not supported" and generates without them).
constexpr std::array<std::string_view, 12> kIgnoredKeywords = {"not",
                                                               "if",
                                                               "then",
                                                               "else",
                                                               "dependentRequired",
                                                               "dependentSchemas",
                                                               "dependencies",
                                                               "contains",
                                                               "minContains",
                                                               "maxContains",
                                                               "$dynamicRef",
                                                               "$recursiveRef"};

// Object-valued keywords whose values are schemas, and array-valued ones
// whose entries are.
constexpr std::array<std::string_view, 6> kSchemaKeywords = {
    "additionalProperties", "items",          "propertyNames", "unevaluatedProperties",
    "unevaluatedItems",     "additionalItems"};
constexpr std::array<std::string_view, 4> kSchemaListKeywords = {"anyOf", "oneOf", "allOf",
                                                                 "prefixItems"};
constexpr std::array<std::string_view, 5> kSchemaMapKeywords = {
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};

std::string escape_pointer(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

Status unsupported(std::string_view keyword, const std::string& where, std::string_view why) {
  return invalid_argument("unsupported JSON Schema keyword '" + std::string(keyword) + "' at " +
                          (where.empty() ? std::string("/") : where) + ": " + std::string(why));
}

bool has_type(const nlohmann::json& s, std::string_view type) {
  auto it = s.find("type");
  if (it == s.end()) return false;
  if (it->is_string()) return it->get_ref<const std::string&>() == type;
  if (it->is_array())
    for (const auto& t : *it)
      if (t.is_string() && t.get_ref<const std::string&>() == type) return true;
  return false;
}

Status check(const nlohmann::json& s, const std::string& where, int depth) {
  // Deeper than any real schema; the HTTP layer bounds JSON nesting anyway.
  constexpr int kMaxDepth = 128;
  if (depth > kMaxDepth) return invalid_argument("the JSON Schema nests too deeply at " + where);
  if (s.is_boolean()) return {};
  if (!s.is_object())
    return invalid_argument("a JSON Schema must be an object or a boolean at " +
                            (where.empty() ? std::string("/") : where));
  for (std::string_view k : kIgnoredKeywords)
    if (s.contains(k)) return unsupported(k, where, "the grammar engine cannot enforce it");
  if (auto it = s.find("uniqueItems"); it != s.end() && *it != false)
    return unsupported("uniqueItems", where, "the grammar engine cannot enforce unique items");
  if (auto it = s.find("allOf"); it != s.end() && it->is_array() && it->size() > 1)
    return unsupported("allOf", where,
                       "only a single-entry allOf is supported; merge its schemas instead");
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string() || (it->get_ref<const std::string&>() != "#" &&
                             it->get_ref<const std::string&>().rfind("#/", 0) != 0))
      return unsupported("$ref", where, "only references inside the schema (\"#/...\") resolve");
  }
  if (s.contains("multipleOf")) {
    const auto& m = s["multipleOf"];
    const bool integral = m.is_number_integer() || m.is_number_unsigned();
    if (!has_type(s, "integer") || has_type(s, "number") || !integral)
      return unsupported("multipleOf", where, "supported only on integers, with an integer value");
    for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(bound))
        return unsupported("multipleOf", where,
                           std::string("not supported together with ") + bound);
  }
  if ((s.contains("minLength") || s.contains("maxLength")) &&
      (s.contains("pattern") || s.contains("format")))
    return unsupported(s.contains("minLength") ? "minLength" : "maxLength", where,
                       "not supported together with pattern or format");

  for (std::string_view k : kSchemaKeywords) {
    auto it = s.find(k);
    if (it == s.end()) continue;
    const std::string at = where + "/" + std::string(k);
    if (it->is_array()) {  // items as a tuple (draft 4-7)
      for (std::size_t i = 0; i < it->size(); ++i)
        VPOD_RETURN_IF_ERROR(check((*it)[i], at + "/" + std::to_string(i), depth + 1));
    } else {
      VPOD_RETURN_IF_ERROR(check(*it, at, depth + 1));
    }
  }
  for (std::string_view k : kSchemaListKeywords) {
    auto it = s.find(k);
    if (it == s.end()) continue;
    if (!it->is_array())
      return invalid_argument("JSON Schema '" + std::string(k) + "' must be an array at " + where);
    for (std::size_t i = 0; i < it->size(); ++i)
      VPOD_RETURN_IF_ERROR(
          check((*it)[i], where + "/" + std::string(k) + "/" + std::to_string(i), depth + 1));
  }
  for (std::string_view k : kSchemaMapKeywords) {
    auto it = s.find(k);
    if (it == s.end()) continue;
    if (!it->is_object())
      return invalid_argument("JSON Schema '" + std::string(k) + "' must be an object at " + where);
    for (const auto& [name, sub] : it->items())
      VPOD_RETURN_IF_ERROR(
          check(sub, where + "/" + std::string(k) + "/" + escape_pointer(name), depth + 1));
  }
  return {};
}

}  // namespace

Status check_schema_supported(const nlohmann::json& schema) { return check(schema, "", 0); }

}  // namespace vpod::grammar
