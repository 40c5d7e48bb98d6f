// Jinja values (value.h): Python's truthiness, str/repr, equality, ordering,
// len and iteration, and conversion from JSON.

#include "tokenizer/jinja/value.h"

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "tokenizer/jinja/pystr.h"

namespace vpod::tokenizer::jinja {

void throw_error(Error::Kind kind, std::string message, int line) {
  throw Error{kind, std::move(message), line};
}

bool Object::set_attr(std::string_view, Value) { return false; }

std::optional<Value> Namespace::get_attr(std::string_view name) const {
  const Value* v = attrs_.find(name);
  if (!v) return std::nullopt;
  return *v;
}

bool Namespace::set_attr(std::string_view name, Value value) {
  attrs_.set(Value(std::string(name)), std::move(value));
  return true;
}

void Namespace::release() { attrs_ = Dict(); }

std::string Namespace::repr(int depth) const {
  std::string out = "<Namespace {";
  bool first = true;
  for (const auto& [k, v] : attrs_.entries()) {
    if (!first) out += ", ";
    first = false;
    out += to_repr(k, depth + 1) + ": " + to_repr(v, depth + 1);
  }
  return out + "}>";
}

const Value* Dict::find(std::string_view key) const {
  const auto it = string_index_.find(std::string(key));
  return it == string_index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : entries_) {
    if (!k.is_string() && py_equal(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (key.is_string()) {
    const auto [it, inserted] = string_index_.emplace(key.str(), entries_.size());
    if (!inserted) {
      entries_[it->second].second = std::move(value);
      return;
    }
    entries_.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& [k, v] : entries_) {
    if (!k.is_string() && py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string message) {
  return Value(Undefined{std::make_shared<const std::string>(std::move(message))});
}

const std::string& Value::undefined_message() const {
  static const std::string generic = "undefined value";
  const auto& u = std::get<Undefined>(data_);
  return u.message ? *u.message : generic;
}

double Value::to_double() const {
  if (is_float()) return as_float();
  if (is_int()) return static_cast<double>(as_int());
  return as_bool() ? 1.0 : 0.0;
}

void fail_undefined(const Value& v) { throw_runtime(v.undefined_message()); }

bool truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int() != 0;
  if (v.is_float()) return v.as_float() != 0.0;
  if (v.is_string()) return !v.str().empty();
  if (v.is_list()) return !v.list().items.empty();
  if (v.is_dict()) return v.dict().size() != 0;
  if (v.is_object()) return v.object().truthy();
  return true;
}

static void check_depth(int depth) {
  if (depth > kMaxValueDepth) {
    throw_error(Error::Kind::limit,
                "value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
}

std::string to_repr(const Value& v, int depth) {
  check_depth(depth);
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.as_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_float()) return pystr::float_repr(v.as_float());
  if (v.is_string()) return pystr::repr(v.str());
  if (v.is_list()) {
    const List& l = v.list();
    std::string out = l.is_tuple ? "(" : "[";
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      out += to_repr(l.items[i], depth + 1);
    }
    if (l.is_tuple && l.items.size() == 1) out += ",";
    out += l.is_tuple ? ")" : "]";
    return out;
  }
  if (v.is_dict()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, val] : v.dict().entries()) {
      if (!first) out += ", ";
      first = false;
      out += to_repr(k, depth + 1);
      out += ": ";
      out += to_repr(val, depth + 1);
    }
    return out + "}";
  }
  if (v.is_callable()) return "<function " + v.callable().name + ">";
  return v.object().repr(depth + 1);
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_string()) return v.str();
  return to_repr(v);
}

bool py_equal(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) return a.to_int() == b.to_int();
    return a.to_double() == b.to_double();
  }
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  if (a.is_list() && b.is_list()) {
    const List& x = a.list();
    const List& y = b.list();
    // A list never equals a tuple in Python.
    if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i) {
      if (!py_equal(x.items[i], y.items[i], depth + 1)) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict& x = a.dict();
    const Dict& y = b.dict();
    if (x.size() != y.size()) return false;
    for (const auto& [k, v] : x.entries()) {
      const Value* other = y.find(k);
      if (!other || !py_equal(v, *other, depth + 1)) return false;
    }
    return true;
  }
  if (a.is_callable() && b.is_callable()) return &a.callable() == &b.callable();
  if (a.is_object() && b.is_object()) return &a.object() == &b.object();
  return false;
}

[[noreturn]] static void fail_unorderable(const Value& a, const Value& b) {
  throw_runtime("'<' not supported between instances of '" + type_name(a) + "' and '" +
                type_name(b) + "'");
}

int py_compare(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) {
      const int64_t x = a.to_int();
      const int64_t y = b.to_int();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const double x = a.to_double();
    const double y = b.to_double();
    return x < y ? -1 : (x > y ? 1 : 0);  // NaN compares "equal": neither < nor >
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i], depth + 1)) return py_compare(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail_unorderable(a, b);
}

std::string type_name(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return "str";
  if (v.is_list()) return v.list().is_tuple ? "tuple" : "list";
  if (v.is_dict()) return "dict";
  if (v.is_callable()) return "function";
  std::string_view name = v.object().class_name();
  const size_t dot = name.rfind('.');
  return std::string(dot == std::string_view::npos ? name : name.substr(dot + 1));
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_undefined()) return "jinja2.runtime.Undefined object";
  if (v.is_object()) return std::string(v.object().class_name()) + " object";
  return type_name(v) + " object";
}

int64_t py_len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return pystr::length(v.str());
  if (v.is_list()) return static_cast<int64_t>(v.list().items.size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict().size());
  if (v.is_object()) {
    if (const auto n = v.object().length()) return *n;
  }
  throw_runtime("object of type '" + type_name(v) + "' has no len()");
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.list().items;
  if (v.is_dict()) {
    std::vector<Value> keys;
    keys.reserve(v.dict().size());
    for (const auto& [k, val] : v.dict().entries()) keys.push_back(k);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    const std::string& s = v.str();
    size_t i = 0;
    while (i < s.size()) {
      size_t j = i + 1;
      while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
      chars.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return chars;
  }
  throw_runtime("'" + type_name(v) + "' object is not iterable");
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (!utf8::is_valid(s)) throw_runtime("template variables contain invalid UTF-8");
      return Value(s);
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, item] : j.items()) {
        if (!utf8::is_valid(k)) throw_runtime("template variables contain invalid UTF-8");
        d.set(Value(k), from_json(item, depth + 1));
      }
      return Value(std::move(d));
    }
    default: throw_runtime("unsupported JSON value (binary or discarded)");
  }
}

}  // namespace vpod::tokenizer::jinja
