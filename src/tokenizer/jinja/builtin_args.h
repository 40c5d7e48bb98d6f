// Internal to the Jinja engine's builtins (filters.cpp, builtins.cpp):
// binding call arguments to a Python-style signature, argument conversions
// and small helpers both files use.
#pragma once

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/renderer.h"
#include "tokenizer/jinja/value.h"

namespace vpod::tokenizer::jinja {

// ---- argument binding --------------------------------------------------

// Binds call arguments to a Python signature's parameter names: positional
// arguments first, then keywords; raises TypeError-like errors otherwise.
class Params {
 public:
  Params(std::string_view fn, CallArgs& args, std::initializer_list<std::string_view> names)
      : names_(names), values_(names.size()) {
    if (args.positional.size() > names_.size()) {
      throw_runtime(std::string(fn) + "() takes at most " + std::to_string(names_.size()) +
                    " argument(s) (" + std::to_string(args.positional.size()) + " given)");
    }
    for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = args.positional[i];
    for (auto& [name, value] : args.keyword) {
      const auto it = std::find(names_.begin(), names_.end(), name);
      if (it == names_.end()) {
        throw_runtime(std::string(fn) + "() got an unexpected keyword argument '" + name + "'");
      }
      const size_t i = static_cast<size_t>(it - names_.begin());
      if (values_[i]) {
        throw_runtime(std::string(fn) + "() got multiple values for argument '" + name + "'");
      }
      values_[i] = value;
    }
  }

  bool has(size_t i) const { return values_[i].has_value(); }
  const Value& get(size_t i, const Value& fallback) const {
    return values_[i] ? *values_[i] : fallback;
  }
  const Value& required(size_t i, std::string_view fn) const {
    if (!values_[i]) {
      throw_runtime(std::string(fn) + "() missing required argument '" + std::string(names_[i]) +
                    "'");
    }
    return *values_[i];
  }
  bool get_bool(size_t i, bool fallback) const {
    return values_[i] ? truthy(*values_[i]) : fallback;
  }

 private:
  std::vector<std::string_view> names_;
  std::vector<std::optional<Value>> values_;
};

inline const Value kNone{None{}};

inline int64_t int_arg(const Value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return v.to_int();
  if (v.is_undefined()) fail_undefined(v);
  std::string message = type_name(v);
  message.insert(0, 1, '\'');
  message.append("' object cannot be interpreted as an integer (").append(what).append(")");
  throw_runtime(std::move(message));
}

inline const std::string& str_arg(const Value& v, std::string_view what) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) fail_undefined(v);
  throw_runtime(std::string(what) + " must be str, not " + type_name(v));
}

// jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then 0.
inline Value get_attribute_path(Renderer& r, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return r.getitem(item, attribute);
  Value v = item;
  std::string_view path = attribute.str();
  while (true) {
    const size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    int64_t index = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    if (!part.empty() && ec == std::errc() && ptr == part.data() + part.size()) {
      v = r.getitem(v, Value(index));
    } else {
      v = r.getitem(v, Value(std::string(part)));
    }
    if (dot == std::string_view::npos) break;
    path.remove_prefix(dot + 1);
  }
  return v;
}

inline Value lower_if_string(const Value& v) {
  return v.is_string() ? Value(pystr::lower(v.str())) : v;
}

// Python's str.center(width, fill).
inline std::string center(std::string_view s, int64_t width, std::string_view fill) {
  const int64_t len = pystr::length(s);
  if (width <= len) return std::string(s);
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

template <typename Names>
bool contains_name(const Names& names, std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace vpod::tokenizer::jinja
