// jinja2's built-in filters, tests and globals, and the Python methods of
// str, dict and list that templates call, with jinja2's and Python's
// semantics. Hugging Face's own additions (tojson with ensure_ascii=False,
// raise_exception, strftime_now) are here too.
#pragma once

#include <optional>
#include <string_view>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace vpod::tokenizer::jinja {

// nullptr when this engine has no such filter/test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// Names jinja2 knows that this engine does not implement (for a clearer
// parse error than "no filter named").
bool is_unsupported_jinja2_filter(std::string_view name);
bool is_unsupported_jinja2_test(std::string_view name);

// A method of a built-in type as a bound callable ('abc'.upper, d.items),
// or nullopt when the type has no such attribute.
std::optional<Value> builtin_method(const Value& receiver, std::string_view name);

// The globals every template sees: range, dict, namespace, raise_exception,
// strftime_now. nullopt when `name` is not one.
std::optional<Value> builtin_global(std::string_view name);

// Applies a test by name (select/reject and the like); raises when unknown.
bool apply_test(Renderer& r, std::string_view name, const Value& input, CallArgs& args);
// Applies a filter by name (map); raises when unknown.
Value apply_filter(Renderer& r, std::string_view name, const Value& input, CallArgs& args);

}  // namespace vpod::tokenizer::jinja
