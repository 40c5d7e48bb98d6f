#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <initializer_list>

#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/renderer.h"

namespace vpod::tokenizer::jinja {

namespace {

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

const Value kNone{None{}};

int64_t int_arg(const Value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return v.to_int();
  if (v.is_undefined()) fail_undefined(v);
  throw_runtime("'" + type_name(v) + "' object cannot be interpreted as an integer (" +
                std::string(what) + ")");
}

const std::string& str_arg(const Value& v, std::string_view what) {
  if (v.is_string()) return v.str();
  if (v.is_undefined()) fail_undefined(v);
  throw_runtime(std::string(what) + " must be str, not " + type_name(v));
}

// jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then 0.
Value get_attribute_path(Renderer& r, const Value& item, const Value& attribute) {
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

Value lower_if_string(const Value& v) { return v.is_string() ? Value(pystr::lower(v.str())) : v; }

// ---- JSON (Hugging Face's tojson is json.dumps) --------------------------

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t cp : pystr::decode(s)) {
    switch (cp) {
      case U'"': out += "\\\""; continue;
      case U'\\': out += "\\\\"; continue;
      case U'\n': out += "\\n"; continue;
      case U'\r': out += "\\r"; continue;
      case U'\t': out += "\\t"; continue;
      case U'\b': out += "\\b"; continue;
      case U'\f': out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                      static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      pystr::append_utf8(out, cp);
    }
  }
  out.push_back('"');
}

std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return pystr::float_repr(v);
}

std::string json_key(const Value& k) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return json_float(k.as_float());
  if (k.is_none()) return "null";
  throw_runtime("keys must be str, int, float, bool or None, not " + type_name(k));
}

void json_dump(Renderer& r, std::string& out, const Value& v, const JsonOptions& o, int level) {
  if (level > kMaxValueDepth) throw_runtime("Circular reference detected (or nesting too deep)");
  r.step();
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    out += json_float(v.as_float());
  } else if (v.is_string()) {
    json_string(out, v.str(), o.ensure_ascii);
  } else if (v.is_list() || v.is_dict()) {
    const bool is_list = v.is_list();
    const size_t n = is_list ? v.list().items.size() : v.dict().size();
    if (n == 0) {
      out += is_list ? "[]" : "{}";
      return;
    }
    out.push_back(is_list ? '[' : '{');
    std::string newline_indent;
    if (o.indent) {
      newline_indent = "\n";
      for (int i = 0; i <= level; ++i) newline_indent += *o.indent;
      out += newline_indent;
    }
    const std::string separator = o.item_separator + newline_indent;
    if (is_list) {
      for (size_t i = 0; i < n; ++i) {
        if (i) out += separator;
        json_dump(r, out, v.list().items[i], o, level + 1);
      }
    } else {
      using Entry = std::pair<Value, Value>;
      std::vector<const Entry*> entries;
      for (const auto& e : v.dict().entries()) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
          return py_compare(a->first, b->first) < 0;
        });
      }
      bool first = true;
      for (const auto* e : entries) {
        if (!first) out += separator;
        first = false;
        json_string(out, json_key(e->first), o.ensure_ascii);
        out += o.key_separator;
        json_dump(r, out, e->second, o, level + 1);
      }
    }
    if (o.indent) {
      out.push_back('\n');
      for (int i = 0; i < level; ++i) out += *o.indent;
    }
    out.push_back(is_list ? ']' : '}');
  } else {
    throw_runtime("Object of type " + type_name(v) + " is not JSON serializable");
  }
  if (out.size() > (size_t{1} << 30)) throw_error(Error::Kind::limit, "tojson output too large");
}

// ---- filters -------------------------------------------------------------

Value f_abs(Renderer&, const Value& v, CallArgs& args) {
  Params p("abs", args, {});
  if (v.is_int() || v.is_bool()) {
    if (v.to_int() == INT64_MIN) throw_runtime("integer overflow");
    return Value(std::abs(v.to_int()));
  }
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_undefined()) fail_undefined(v);
  throw_runtime("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Renderer& r, const Value& v, CallArgs& args) {
  Params p("attr", args, {"name"});
  // Python's getattr only, without the item lookup `.name` falls back to.
  (void)r;
  const std::string& name = str_arg(p.required(0, "attr"), "attribute name");
  if (v.is_undefined()) fail_undefined(v);
  std::optional<Value> found = v.is_object() ? v.object().get_attr(name) : builtin_method(v, name);
  if (found) return *found;
  return Value::undefined(pystr::repr(object_type_repr(v)) + " has no attribute " +
                          pystr::repr(name));
}

Value f_batch(Renderer& r, const Value& v, CallArgs& args) {
  Params p("batch", args, {"linecount", "fill_with"});
  const int64_t count = int_arg(p.required(0, "batch"), "linecount");
  if (count <= 0) throw_runtime("batch size must be positive");
  std::vector<Value> batches;
  std::vector<Value> current;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(current.size()) == count) {
      batches.push_back(r.make_list(std::move(current)));
      current.clear();
    }
    current.push_back(item);
  }
  if (!current.empty()) {
    if (p.has(1) && !p.get(1, kNone).is_none()) {
      while (static_cast<int64_t>(current.size()) < count) current.push_back(p.get(1, kNone));
    }
    batches.push_back(r.make_list(std::move(current)));
  }
  return r.make_list(std::move(batches));
}

Value f_capitalize(Renderer& r, const Value& v, CallArgs& args) {
  Params p("capitalize", args, {});
  return r.make_string(pystr::capitalize(to_str(v)));
}

std::string center(std::string_view s, int64_t width, std::string_view fill) {
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

Value f_center(Renderer& r, const Value& v, CallArgs& args) {
  Params p("center", args, {"width"});
  const int64_t width = p.has(0) ? int_arg(p.get(0, kNone), "width") : 80;
  if (width > (int64_t{1} << 24)) throw_error(Error::Kind::limit, "center width too large");
  return r.make_string(center(to_str(v), width, " "));
}

Value f_length(Renderer&, const Value& v, CallArgs& args) {
  Params p("length", args, {});
  return Value(py_len(v));
}

Value f_default(Renderer&, const Value& v, CallArgs& args) {
  Params p("default", args, {"default_value", "boolean"});
  static const Value kEmpty{std::string()};
  const bool boolean = p.get_bool(1, false);
  if (v.is_undefined() || (boolean && !truthy(v))) return p.get(0, kEmpty);
  return v;
}

Value f_dictsort(Renderer& r, const Value& v, CallArgs& args) {
  Params p("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) {
    if (v.is_undefined()) fail_undefined(v);
    throw_runtime("'" + type_name(v) + "' object has no attribute 'items'");
  }
  const bool case_sensitive = p.get_bool(0, false);
  static const Value kKey{std::string("key")};
  const std::string& by = str_arg(p.get(1, kKey), "by");
  size_t pos;
  if (by == "key") {
    pos = 0;
  } else if (by == "value") {
    pos = 1;
  } else {
    throw_runtime("You can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict().entries()) items.push_back(Value::tuple({k, val}));
  auto key = [&](const Value& item) {
    const Value& x = item.list().items[pos];
    return case_sensitive ? x : lower_if_string(x);
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& a, const Value& b) { return py_compare(key(a), key(b)) < 0; });
  if (p.get_bool(2, false)) std::reverse(items.begin(), items.end());
  return r.make_list(std::move(items));
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value f_escape(Renderer& r, const Value& v, CallArgs& args) {
  Params p("escape", args, {});
  return r.make_string(html_escape(to_str(v)));
}

Value f_first(Renderer&, const Value& v, CallArgs& args) {
  Params p("first", args, {});
  if (v.is_list()) {
    if (v.list().items.empty()) return Value::undefined("No first item, sequence was empty.");
    return v.list().items.front();
  }
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Renderer&, const Value& v, CallArgs& args) {
  Params p("last", args, {});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python's float(str): surrounding whitespace, sign, inf/nan, underscores
// between digits.
std::optional<double> parse_python_float(std::string_view text) {
  const std::string s = pystr::strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    clean.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[i]))));
  }
  std::string_view body = clean;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") return negative ? -HUGE_VAL : HUGE_VAL;
  if (body == "nan") return std::nan("");
  if (body.empty() || body[0] == '+' || body[0] == '-') return std::nullopt;
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (ptr != body.data() + body.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range) {
    value = body.find("e-") != std::string_view::npos ? 0.0 : HUGE_VAL;
  } else if (ec != std::errc()) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

// Python's int(str, base) for bases 2..36 (and 0: from the prefix).
std::optional<int64_t> parse_python_int(std::string_view text, int base) {
  const std::string s = pystr::strip(text, std::nullopt, true, true);
  std::string_view body = s;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  auto has_prefix = [&](char p) {
    return body.size() >= 2 && body[0] == '0' && (body[1] | 0x20) == p;
  };
  if (base == 0) {
    base = has_prefix('x') ? 16 : has_prefix('o') ? 8 : has_prefix('b') ? 2 : 10;
  }
  if ((base == 16 && has_prefix('x')) || (base == 8 && has_prefix('o')) ||
      (base == 2 && has_prefix('b'))) {
    body.remove_prefix(2);
    if (!body.empty() && body[0] == '_') body.remove_prefix(1);
  }
  if (body.empty()) return std::nullopt;
  int64_t value = 0;
  bool last_underscore = true;  // no leading underscore
  for (char c : body) {
    if (c == '_') {
      if (last_underscore) return std::nullopt;
      last_underscore = true;
      continue;
    }
    last_underscore = false;
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
      d = (c | 0x20) - 'a' + 10;
    } else {
      return std::nullopt;
    }
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value)) {
      throw_runtime("integer too large (Python would use a big integer)");
    }
  }
  if (last_underscore) return std::nullopt;
  return negative ? -value : value;
}

std::optional<int64_t> float_to_int(double d) {
  if (std::isnan(d)) return std::nullopt;
  if (std::isinf(d)) throw_runtime("cannot convert float infinity to integer");
  const double t = std::trunc(d);
  if (t >= 9.2233720368547758e18 || t < -9.2233720368547758e18) {
    throw_runtime("integer too large (Python would use a big integer)");
  }
  return static_cast<int64_t>(t);
}

Value f_float(Renderer&, const Value& v, CallArgs& args) {
  Params p("float", args, {"default"});
  static const Value kZero{0.0};
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    if (auto d = parse_python_float(v.str())) return Value(*d);
  }
  return p.get(0, kZero);
}

Value f_int(Renderer&, const Value& v, CallArgs& args) {
  Params p("int", args, {"default", "base"});
  static const Value kZero{int64_t{0}};
  if (v.is_undefined()) fail_undefined(v);
  const int64_t base = p.has(1) ? int_arg(p.get(1, kNone), "base") : 10;
  if (v.is_int() || v.is_bool()) return Value(v.to_int());
  if (v.is_float()) {
    if (auto i = float_to_int(v.as_float())) return Value(*i);
    return p.get(0, kZero);
  }
  if (v.is_string()) {
    if (base != 0 && (base < 2 || base > 36))
      throw_runtime("int() base must be >= 2 and <= 36, or 0");
    if (auto i = parse_python_int(v.str(), static_cast<int>(base))) return Value(*i);
    // jinja2's quirk: "42.23"|int is 42.
    if (auto d = parse_python_float(v.str())) {
      if (auto i = float_to_int(*d)) return Value(*i);
    }
  }
  return p.get(0, kZero);
}

Value f_indent(Renderer& r, const Value& v, CallArgs& args) {
  Params p("indent", args, {"width", "first", "blank"});
  std::string indention;
  static const Value kFour{int64_t{4}};
  const Value& width = p.get(0, kFour);
  if (width.is_string()) {
    indention = width.str();
  } else {
    const int64_t n = int_arg(width, "width");
    if (n > (int64_t{1} << 20)) throw_error(Error::Kind::limit, "indent width too large");
    indention.assign(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
  }
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) {
    throw_runtime("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  }
  // jinja2 appends a newline so that splitlines() keeps a trailing empty line.
  const std::vector<std::string> lines = pystr::splitlines(v.str() + "\n", false);
  std::string out;
  if (p.get_bool(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (p.get_bool(1, false)) out = indention + out;
  return r.make_string(std::move(out));
}

Value f_items(Renderer& r, const Value& v, CallArgs& args) {
  Params p("items", args, {});
  if (v.is_undefined()) return r.make_list({});
  if (!v.is_dict()) throw_runtime("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict().entries()) items.push_back(Value::tuple({k, val}));
  return r.make_list(std::move(items));
}

Value f_join(Renderer& r, const Value& v, CallArgs& args) {
  Params p("join", args, {"d", "attribute"});
  static const Value kEmpty{std::string()};
  const std::string sep = to_str(p.get(0, kEmpty));
  const bool by_attribute = p.has(1) && !p.get(1, kNone).is_none();
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(by_attribute ? get_attribute_path(r, item, p.get(1, kNone)) : item);
    r.charge(0);
  }
  return r.make_string(std::move(out));
}

Value f_list(Renderer& r, const Value& v, CallArgs& args) {
  Params p("list", args, {});
  return r.make_list(iterate(v));
}

Value f_lower(Renderer& r, const Value& v, CallArgs& args) {
  Params p("lower", args, {});
  return r.make_string(pystr::lower(to_str(v)));
}

Value f_upper(Renderer& r, const Value& v, CallArgs& args) {
  Params p("upper", args, {});
  return r.make_string(pystr::upper(to_str(v)));
}

Value f_map(Renderer& r, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    // map(attribute='x', default=...)
    std::optional<Value> attribute;
    Value fallback = kNone;
    for (auto& [name, value] : args.keyword) {
      if (name == "attribute") {
        attribute = value;
      } else if (name == "default") {
        fallback = value;
      } else {
        throw_runtime("Unexpected keyword argument '" + name + "'");
      }
    }
    if (!attribute) throw_runtime("map requires a filter argument");
    for (const Value& item : iterate(v)) {
      Value x = get_attribute_path(r, item, *attribute);
      if (x.is_undefined() && !fallback.is_none()) x = fallback;
      out.push_back(std::move(x));
    }
    return r.make_list(std::move(out));
  }
  const std::string name = str_arg(args.positional[0], "filter name");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(v)) {
    CallArgs call_args = rest;
    out.push_back(apply_filter(r, name, item, call_args));
  }
  return r.make_list(std::move(out));
}

Value min_or_max(Renderer& r, const Value& v, CallArgs& args, bool want_max, const char* fn) {
  Params p(fn, args, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.get_bool(0, false);
  const bool by_attribute = p.has(1) && !p.get(1, kNone).is_none();
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = by_attribute ? get_attribute_path(r, item, p.get(1, kNone)) : item;
    return case_sensitive ? k : lower_if_string(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    const int c = py_compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value f_max(Renderer& r, const Value& v, CallArgs& args) {
  return min_or_max(r, v, args, true, "max");
}
Value f_min(Renderer& r, const Value& v, CallArgs& args) {
  return min_or_max(r, v, args, false, "min");
}

// select / reject / selectattr / rejectattr.
Value select_or_reject(Renderer& r, const Value& v, CallArgs& args, bool by_attribute,
                       bool keep_when) {
  size_t off = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw_runtime("Missing parameter for attribute name");
    attribute = args.positional[0];
    off = 1;
  }
  std::optional<std::string> test_name;
  CallArgs test_args;
  if (args.positional.size() > off) {
    test_name = str_arg(args.positional[off], "test name");
    test_args.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(off) + 1,
                                args.positional.end());
  }
  test_args.keyword = args.keyword;
  std::vector<Value> out;
  if (!truthy(v) && !v.is_object()) return r.make_list({});
  for (const Value& item : iterate(v)) {
    const Value x = by_attribute ? get_attribute_path(r, item, attribute) : item;
    bool passed;
    if (test_name) {
      CallArgs call_args = test_args;
      passed = apply_test(r, *test_name, x, call_args);
    } else {
      passed = truthy(x);
    }
    if (passed == keep_when) out.push_back(item);
  }
  return r.make_list(std::move(out));
}

Value f_select(Renderer& r, const Value& v, CallArgs& a) {
  return select_or_reject(r, v, a, false, true);
}
Value f_reject(Renderer& r, const Value& v, CallArgs& a) {
  return select_or_reject(r, v, a, false, false);
}
Value f_selectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_or_reject(r, v, a, true, true);
}
Value f_rejectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_or_reject(r, v, a, true, false);
}

Value f_replace(Renderer& r, const Value& v, CallArgs& args) {
  Params p("replace", args, {"old", "new", "count"});
  const std::string old_sub = to_str(p.required(0, "replace"));
  const std::string new_sub = to_str(p.required(1, "replace"));
  const Value& count = p.get(2, kNone);
  const int64_t n = count.is_none() ? -1 : int_arg(count, "count");
  const std::string s = to_str(v);
  // Bound the result before building it.
  const int64_t hits = old_sub.empty() ? pystr::length(s) + 1 : pystr::count(s, old_sub);
  r.charge(static_cast<size_t>(std::max<int64_t>(0, hits)) * new_sub.size());
  return r.make_string(pystr::replace(s, old_sub, new_sub, n));
}

Value f_reverse(Renderer& r, const Value& v, CallArgs& args) {
  Params p("reverse", args, {});
  if (v.is_string()) {
    std::u32string cps = pystr::decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return r.make_string(pystr::encode(cps));
  }
  if (!v.is_undefined() && !v.is_list() && !v.is_dict()) throw_runtime("argument must be iterable");
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return r.make_list(std::move(items));
}

// Python's round(x, ndigits): correctly rounded, ties to even on the exact
// binary value, which is what printf's %.*f does too.
double python_round(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits > 300) return x;
  if (ndigits >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(ndigits), x);
    double out = 0.0;
    std::from_chars(buf, buf + std::strlen(buf), out);
    return out;
  }
  const double scale = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / scale) * scale;
}

Value f_round(Renderer&, const Value& v, CallArgs& args) {
  Params p("round", args, {"precision", "method"});
  const int64_t precision = p.has(0) ? int_arg(p.get(0, kNone), "precision") : 0;
  static const Value kCommon{std::string("common")};
  const std::string& method = str_arg(p.get(1, kCommon), "method");
  if (method != "common" && method != "ceil" && method != "floor") {
    throw_runtime("method must be common, ceil or floor");
  }
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw_runtime("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int() || v.is_bool()) {
      if (precision >= 0) return Value(v.to_int());
      return Value(static_cast<int64_t>(python_round(v.to_double(), precision)));
    }
    return Value(python_round(v.as_float(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.to_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Renderer&, const Value& v, CallArgs& args) {
  Params p("safe", args, {});
  // No autoescaping in chat templates, so Markup is plain text here.
  return v.is_string() ? v : Value(to_str(v));
}

Value f_sort(Renderer& r, const Value& v, CallArgs& args) {
  Params p("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = p.get_bool(0, false);
  const bool case_sensitive = p.get_bool(1, false);
  const bool by_attribute = p.has(2) && !p.get(2, kNone).is_none();
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = by_attribute ? get_attribute_path(r, items[i], p.get(2, kNone)) : items[i];
    keyed.emplace_back(case_sensitive ? k : lower_if_string(k), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? py_compare(b.first, a.first) < 0 : py_compare(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return r.make_list(std::move(out));
}

Value f_string(Renderer& r, const Value& v, CallArgs& args) {
  Params p("string", args, {});
  return v.is_string() ? v : r.make_string(to_str(v));
}

Value f_sum(Renderer& r, const Value& v, CallArgs& args) {
  Params p("sum", args, {"attribute", "start"});
  static const Value kZero{int64_t{0}};
  Value total = p.get(1, kZero);
  const bool by_attribute = p.has(0) && !p.get(0, kNone).is_none();
  for (const Value& item : iterate(v)) {
    total = r.binary(BinaryOp::add, total,
                     by_attribute ? get_attribute_path(r, item, p.get(0, kNone)) : item);
  }
  return total;
}

Value f_title(Renderer& r, const Value& v, CallArgs& args) {
  Params p("title", args, {});
  // jinja2 splits on runs of [-\s({\[<] and upper-cases each piece's first
  // character, lower-casing the rest.
  bool at_word_start = true;
  std::string out;
  for (char32_t cp : pystr::decode(to_str(v))) {
    const bool sep =
        cp == U'-' || cp == U'(' || cp == U'{' || cp == U'[' || cp == U'<' || pystr::is_space(cp);
    if (sep) {
      pystr::append_utf8(out, cp);
      at_word_start = true;
      continue;
    }
    pystr::append_utf8(out, at_word_start ? pystr::upper_cp(cp) : pystr::lower_cp(cp));
    at_word_start = false;
  }
  return r.make_string(std::move(out));
}

Value f_tojson(Renderer& r, const Value& v, CallArgs& args) {
  Params p("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = p.get_bool(0, false);
  const Value& indent = p.get(1, kNone);
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    const int64_t n = int_arg(indent, "indent");
    if (n > 1024) throw_error(Error::Kind::limit, "tojson indent too large");
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
  }
  if (o.indent) o.item_separator = ",";
  const Value& separators = p.get(2, kNone);
  if (!separators.is_none() && !separators.is_undefined()) {
    const std::vector<Value> seps = iterate(separators);
    if (seps.size() != 2) throw_runtime("separators must be an (item, key) pair");
    o.item_separator = str_arg(seps[0], "item separator");
    o.key_separator = str_arg(seps[1], "key separator");
  }
  o.sort_keys = p.get_bool(3, false);
  std::string out;
  json_dump(r, out, v, o, 0);
  return r.make_string(std::move(out));
}

Value f_trim(Renderer& r, const Value& v, CallArgs& args) {
  Params p("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (p.has(0) && !p.get(0, kNone).is_none()) chars = str_arg(p.get(0, kNone), "chars");
  return r.make_string(pystr::strip(to_str(v), chars, true, true));
}

Value f_unique(Renderer& r, const Value& v, CallArgs& args) {
  Params p("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.get_bool(0, false);
  const bool by_attribute = p.has(1) && !p.get(1, kNone).is_none();
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value k = by_attribute ? get_attribute_path(r, item, p.get(1, kNone)) : item;
    if (!case_sensitive) k = lower_if_string(k);
    bool dup = false;
    for (const Value& s : seen) {
      r.step();
      if (py_equal(s, k)) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    seen.push_back(std::move(k));
    out.push_back(item);
  }
  return r.make_list(std::move(out));
}

Value f_wordcount(Renderer&, const Value& v, CallArgs& args) {
  Params p("wordcount", args, {});
  // re's \w+: runs of letters, digits and underscores.
  int64_t words = 0;
  bool in_word = false;
  for (char32_t cp : pystr::decode(to_str(v))) {
    std::string one;
    pystr::append_utf8(one, cp);
    const bool word_char = cp == U'_' || pystr::is_alnum(one);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value(words);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

constexpr std::string_view kUnsupportedFilters[] = {
    "filesizeformat", "format",   "groupby",   "pprint", "random",   "slice",
    "striptags",      "truncate", "urlencode", "urlize", "wordwrap", "xmlattr",
};

// ---- tests ---------------------------------------------------------------

const Value& test_arg(CallArgs& args, const char* name) {
  if (args.positional.empty()) throw_runtime(std::string("test '") + name + "' needs an argument");
  return args.positional[0];
}

bool t_boolean(Renderer&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_callable(Renderer&, const Value& v, CallArgs&) { return v.is_callable(); }
bool t_defined(Renderer&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Renderer&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_divisibleby(Renderer& r, const Value& v, CallArgs& a) {
  const Value m = r.binary(BinaryOp::mod, v, test_arg(a, "divisibleby"));
  return py_equal(m, Value(int64_t{0}));
}
bool t_eq(Renderer&, const Value& v, CallArgs& a) { return py_equal(v, test_arg(a, "eq")); }
bool t_ne(Renderer&, const Value& v, CallArgs& a) { return !py_equal(v, test_arg(a, "ne")); }
bool t_lt(Renderer&, const Value& v, CallArgs& a) { return py_compare(v, test_arg(a, "lt")) < 0; }
bool t_le(Renderer&, const Value& v, CallArgs& a) { return py_compare(v, test_arg(a, "le")) <= 0; }
bool t_gt(Renderer&, const Value& v, CallArgs& a) { return py_compare(v, test_arg(a, "gt")) > 0; }
bool t_ge(Renderer&, const Value& v, CallArgs& a) { return py_compare(v, test_arg(a, "ge")) >= 0; }
bool t_escaped(Renderer&, const Value&, CallArgs&) { return false; }
bool t_even(Renderer& r, const Value& v, CallArgs&) {
  return py_equal(r.binary(BinaryOp::mod, v, Value(int64_t{2})), Value(int64_t{0}));
}
bool t_odd(Renderer& r, const Value& v, CallArgs&) {
  return py_equal(r.binary(BinaryOp::mod, v, Value(int64_t{2})), Value(int64_t{1}));
}
bool t_false(Renderer&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_true(Renderer&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_filter(Renderer&, const Value& v, CallArgs&) {
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Renderer&, const Value& v, CallArgs&) {
  return v.is_string() && find_test(v.str()) != nullptr;
}
bool t_float(Renderer&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_integer(Renderer&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_in(Renderer& r, const Value& v, CallArgs& a) { return r.contains(test_arg(a, "in"), v); }
bool t_iterable(Renderer&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() ||
         (v.is_object() && v.object().length().has_value());
}
bool t_lower(Renderer&, const Value& v, CallArgs&) { return pystr::is_lower(to_str(v)); }
bool t_upper(Renderer&, const Value& v, CallArgs&) { return pystr::is_upper(to_str(v)); }
bool t_mapping(Renderer&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_none(Renderer&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_number(Renderer&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_sameas(Renderer&, const Value& v, CallArgs& a) {
  // Python identity: singletons and small cached ints compare by value,
  // containers by object.
  const Value& o = test_arg(a, "sameas");
  if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
  if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
  if (v.is_int() && o.is_int())
    return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  if (v.is_string() && o.is_string()) return v.str_ptr() == o.str_ptr();
  if (v.is_list() && o.is_list()) return &v.list() == &o.list();
  if (v.is_dict() && o.is_dict()) return &v.dict() == &o.dict();
  if (v.is_object() && o.is_object()) return &v.object() == &o.object();
  if (v.is_undefined() && o.is_undefined()) return false;
  return false;
}
bool t_sequence(Renderer&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_string(Renderer&, const Value& v, CallArgs&) { return v.is_string(); }

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

// ---- methods of str, dict and list ----------------------------------------

using Method = Value (*)(Renderer& r, const Value& self, CallArgs& args);

Value bind_method(const Value& self, std::string_view name, Method method) {
  return Value(std::make_shared<const Callable>(Callable{
      std::string(name),
      [self, method](Renderer& r, CallArgs& args) -> Value { return method(r, self, args); }}));
}

std::optional<std::string> strip_chars(const Params& p) {
  const Value& chars = p.get(0, kNone);
  if (chars.is_none()) return std::nullopt;
  return str_arg(chars, "strip arg");
}

Value m_strip(Renderer& r, const Value& s, CallArgs& a) {
  Params p("strip", a, {"chars"});
  return r.make_string(pystr::strip(s.str(), strip_chars(p), true, true));
}
Value m_lstrip(Renderer& r, const Value& s, CallArgs& a) {
  Params p("lstrip", a, {"chars"});
  return r.make_string(pystr::strip(s.str(), strip_chars(p), true, false));
}
Value m_rstrip(Renderer& r, const Value& s, CallArgs& a) {
  Params p("rstrip", a, {"chars"});
  return r.make_string(pystr::strip(s.str(), strip_chars(p), false, true));
}

Value split_impl(Renderer& r, const Value& s, CallArgs& a, bool from_right) {
  Params p(from_right ? "rsplit" : "split", a, {"sep", "maxsplit"});
  std::optional<std::string> sep;
  if (!p.get(0, kNone).is_none()) {
    sep = str_arg(p.get(0, kNone), "sep");
    if (sep->empty()) throw_runtime("empty separator");
  }
  const int64_t maxsplit = p.has(1) ? int_arg(p.get(1, kNone), "maxsplit") : -1;
  std::vector<Value> parts;
  for (auto& part : pystr::split(s.str(), sep, maxsplit, from_right)) {
    parts.push_back(r.make_string(std::move(part)));
  }
  return r.make_list(std::move(parts));
}
Value m_split(Renderer& r, const Value& s, CallArgs& a) { return split_impl(r, s, a, false); }
Value m_rsplit(Renderer& r, const Value& s, CallArgs& a) { return split_impl(r, s, a, true); }

Value m_splitlines(Renderer& r, const Value& s, CallArgs& a) {
  Params p("splitlines", a, {"keepends"});
  std::vector<Value> lines;
  for (auto& line : pystr::splitlines(s.str(), p.get_bool(0, false))) {
    lines.push_back(r.make_string(std::move(line)));
  }
  return r.make_list(std::move(lines));
}

// startswith/endswith take a string or a tuple of strings, and optional
// start/end in code points.
Value affix_impl(const Value& s, CallArgs& a, bool prefix) {
  Params p(prefix ? "startswith" : "endswith", a, {"affix", "start", "end"});
  const Value& affix = p.required(0, prefix ? "startswith" : "endswith");
  std::string_view text = s.str();
  std::u32string cps;
  std::string sliced;
  if (p.has(1) || p.has(2)) {
    cps = pystr::decode(text);
    const auto n = static_cast<int64_t>(cps.size());
    auto clamp = [n](int64_t i) {
      if (i < 0) i += n;
      return std::clamp<int64_t>(i, 0, n);
    };
    const int64_t start =
        p.has(1) && !p.get(1, kNone).is_none() ? clamp(int_arg(p.get(1, kNone), "start")) : 0;
    const int64_t end =
        p.has(2) && !p.get(2, kNone).is_none() ? clamp(int_arg(p.get(2, kNone), "end")) : n;
    if (start > end) return Value(false);
    sliced = pystr::encode(std::u32string_view(cps).substr(static_cast<size_t>(start),
                                                           static_cast<size_t>(end - start)));
    text = sliced;
  }
  auto matches = [&](const Value& candidate) {
    if (!candidate.is_string()) {
      throw_runtime(std::string(prefix ? "startswith" : "endswith") +
                    " first arg must be str or a tuple of str, not " + type_name(candidate));
    }
    const std::string& c = candidate.str();
    return prefix ? text.substr(0, c.size()) == c
                  : (text.size() >= c.size() && text.substr(text.size() - c.size()) == c);
  };
  if (affix.is_list() && affix.list().is_tuple) {
    for (const Value& candidate : affix.list().items) {
      if (matches(candidate)) return Value(true);
    }
    return Value(false);
  }
  return Value(matches(affix));
}
Value m_startswith(Renderer&, const Value& s, CallArgs& a) { return affix_impl(s, a, true); }
Value m_endswith(Renderer&, const Value& s, CallArgs& a) { return affix_impl(s, a, false); }

Value m_replace(Renderer& r, const Value& s, CallArgs& a) {
  Params p("replace", a, {"old", "new", "count"});
  const std::string& old_sub = str_arg(p.required(0, "replace"), "replace() argument 1");
  const std::string& new_sub = str_arg(p.required(1, "replace"), "replace() argument 2");
  const int64_t count = p.has(2) ? int_arg(p.get(2, kNone), "count") : -1;
  const int64_t hits =
      old_sub.empty() ? pystr::length(s.str()) + 1 : pystr::count(s.str(), old_sub);
  r.charge(static_cast<size_t>(std::max<int64_t>(0, hits)) * new_sub.size());
  return r.make_string(pystr::replace(s.str(), old_sub, new_sub, count));
}

Value m_upper(Renderer& r, const Value& s, CallArgs& a) {
  Params p("upper", a, {});
  return r.make_string(pystr::upper(s.str()));
}
Value m_lower(Renderer& r, const Value& s, CallArgs& a) {
  Params p("lower", a, {});
  return r.make_string(pystr::lower(s.str()));
}
Value m_title(Renderer& r, const Value& s, CallArgs& a) {
  Params p("title", a, {});
  return r.make_string(pystr::title(s.str()));
}
Value m_capitalize(Renderer& r, const Value& s, CallArgs& a) {
  Params p("capitalize", a, {});
  return r.make_string(pystr::capitalize(s.str()));
}
Value m_swapcase(Renderer& r, const Value& s, CallArgs& a) {
  Params p("swapcase", a, {});
  return r.make_string(pystr::swapcase(s.str()));
}

Value find_impl(const Value& s, CallArgs& a, bool from_right, bool raise, const char* fn) {
  Params p(fn, a, {"sub"});
  const int64_t i = pystr::find(s.str(), str_arg(p.required(0, fn), "sub"), from_right);
  if (i < 0 && raise) throw_runtime("substring not found");
  return Value(i);
}
Value m_find(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, false, false, "find");
}
Value m_rfind(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, true, false, "rfind");
}
Value m_index(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, false, true, "index");
}
Value m_rindex(Renderer&, const Value& s, CallArgs& a) {
  return find_impl(s, a, true, true, "rindex");
}

Value m_count(Renderer&, const Value& s, CallArgs& a) {
  Params p("count", a, {"sub"});
  return Value(pystr::count(s.str(), str_arg(p.required(0, "count"), "sub")));
}

Value m_join(Renderer& r, const Value& s, CallArgs& a) {
  Params p("join", a, {"iterable"});
  std::string out;
  size_t i = 0;
  for (const Value& item : iterate(p.required(0, "join"))) {
    if (!item.is_string()) {
      throw_runtime("sequence item " + std::to_string(i) + ": expected str instance, " +
                    type_name(item) + " found");
    }
    if (i++) out += s.str();
    out += item.str();
  }
  return r.make_string(std::move(out));
}

template <bool (*Pred)(std::string_view)>
Value m_is(Renderer&, const Value& s, CallArgs& a) {
  Params p("is*", a, {});
  return Value(Pred(s.str()));
}

Value m_removeprefix(Renderer& r, const Value& s, CallArgs& a) {
  Params p("removeprefix", a, {"prefix"});
  const std::string& prefix = str_arg(p.required(0, "removeprefix"), "prefix");
  const std::string& text = s.str();
  if (text.compare(0, prefix.size(), prefix) == 0) return r.make_string(text.substr(prefix.size()));
  return s;
}

Value m_removesuffix(Renderer& r, const Value& s, CallArgs& a) {
  Params p("removesuffix", a, {"suffix"});
  const std::string& suffix = str_arg(p.required(0, "removesuffix"), "suffix");
  const std::string& text = s.str();
  if (!suffix.empty() && text.size() >= suffix.size() &&
      text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return r.make_string(text.substr(0, text.size() - suffix.size()));
  }
  return s;
}

Value pad_impl(Renderer& r, const Value& s, CallArgs& a, const char* fn, int where) {
  Params p(fn, a, {"width", "fillchar"});
  const int64_t width = int_arg(p.required(0, fn), "width");
  if (width > (int64_t{1} << 24)) throw_error(Error::Kind::limit, "padding width too large");
  static const Value kSpace{std::string(" ")};
  const std::string& fill = str_arg(p.get(1, kSpace), "fillchar");
  if (pystr::length(fill) != 1)
    throw_runtime("The fill character must be exactly one character long");
  const int64_t len = pystr::length(s.str());
  if (width <= len) return s;
  if (where == 0) return r.make_string(center(s.str(), width, fill));
  std::string pad;
  for (int64_t i = 0; i < width - len; ++i) pad += fill;
  return r.make_string(where < 0 ? s.str() + pad : pad + s.str());
}
Value m_center(Renderer& r, const Value& s, CallArgs& a) { return pad_impl(r, s, a, "center", 0); }
Value m_ljust(Renderer& r, const Value& s, CallArgs& a) { return pad_impl(r, s, a, "ljust", -1); }
Value m_rjust(Renderer& r, const Value& s, CallArgs& a) { return pad_impl(r, s, a, "rjust", 1); }

Value m_zfill(Renderer& r, const Value& s, CallArgs& a) {
  Params p("zfill", a, {"width"});
  const int64_t width = int_arg(p.required(0, "zfill"), "width");
  if (width > (int64_t{1} << 24)) throw_error(Error::Kind::limit, "zfill width too large");
  const std::string& text = s.str();
  const int64_t len = pystr::length(text);
  if (width <= len) return s;
  const bool sign = !text.empty() && (text[0] == '+' || text[0] == '-');
  std::string out = sign ? text.substr(0, 1) : std::string();
  out.append(static_cast<size_t>(width - len), '0');
  out += sign ? text.substr(1) : text;
  return r.make_string(std::move(out));
}

Value partition_impl(Renderer& r, const Value& s, CallArgs& a, bool from_right) {
  Params p(from_right ? "rpartition" : "partition", a, {"sep"});
  const std::string& sep = str_arg(p.required(0, "partition"), "sep");
  if (sep.empty()) throw_runtime("empty separator");
  const std::string& text = s.str();
  const size_t hit = from_right ? text.rfind(sep) : text.find(sep);
  if (hit == std::string::npos) {
    return from_right ? r.make_list({Value(""), Value(""), s}, true)
                      : r.make_list({s, Value(""), Value("")}, true);
  }
  return r.make_list({Value(text.substr(0, hit)), Value(sep), Value(text.substr(hit + sep.size()))},
                     true);
}
Value m_partition(Renderer& r, const Value& s, CallArgs& a) {
  return partition_impl(r, s, a, false);
}
Value m_rpartition(Renderer& r, const Value& s, CallArgs& a) {
  return partition_impl(r, s, a, true);
}

Value m_format(Renderer&, const Value&, CallArgs&) {
  throw_error(Error::Kind::unsupported, "str.format() is not supported by this template engine");
}

Value m_dict_get(Renderer&, const Value& d, CallArgs& a) {
  Params p("get", a, {"key", "default"});
  if (const Value* v = d.dict().find(p.required(0, "get"))) return *v;
  return p.get(1, kNone);
}
Value m_dict_items(Renderer& r, const Value& d, CallArgs& a) {
  Params p("items", a, {});
  std::vector<Value> items;
  for (const auto& [k, v] : d.dict().entries()) items.push_back(Value::tuple({k, v}));
  return r.make_list(std::move(items));
}
Value m_dict_keys(Renderer& r, const Value& d, CallArgs& a) {
  Params p("keys", a, {});
  std::vector<Value> keys;
  for (const auto& [k, v] : d.dict().entries()) keys.push_back(k);
  return r.make_list(std::move(keys));
}
Value m_dict_values(Renderer& r, const Value& d, CallArgs& a) {
  Params p("values", a, {});
  std::vector<Value> values;
  for (const auto& [k, v] : d.dict().entries()) values.push_back(v);
  return r.make_list(std::move(values));
}
Value m_copy(Renderer&, const Value& self, CallArgs& a) {
  Params p("copy", a, {});
  return self;  // values are immutable, so a copy may share
}

Value m_list_index(Renderer&, const Value& l, CallArgs& a) {
  Params p("index", a, {"value"});
  const Value& needle = p.required(0, "index");
  const auto& items = l.list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (py_equal(items[i], needle)) return Value(static_cast<int64_t>(i));
  }
  throw_runtime(to_repr(needle) + " is not in list");
}
Value m_list_count(Renderer&, const Value& l, CallArgs& a) {
  Params p("count", a, {"value"});
  const Value& needle = p.required(0, "count");
  int64_t n = 0;
  for (const Value& item : l.list().items) n += py_equal(item, needle);
  return Value(n);
}

struct MethodEntry {
  std::string_view name;
  Method fn;
};

constexpr MethodEntry kStrMethods[] = {
    {"capitalize", m_capitalize},
    {"center", m_center},
    {"count", m_count},
    {"endswith", m_endswith},
    {"find", m_find},
    {"format", m_format},
    {"index", m_index},
    {"isalnum", m_is<pystr::is_alnum>},
    {"isalpha", m_is<pystr::is_alpha>},
    {"isdigit", m_is<pystr::is_digit>},
    {"islower", m_is<pystr::is_lower>},
    {"isspace", m_is<pystr::is_space_str>},
    {"isupper", m_is<pystr::is_upper>},
    {"join", m_join},
    {"ljust", m_ljust},
    {"lower", m_lower},
    {"lstrip", m_lstrip},
    {"partition", m_partition},
    {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix},
    {"replace", m_replace},
    {"rfind", m_rfind},
    {"rindex", m_rindex},
    {"rjust", m_rjust},
    {"rpartition", m_rpartition},
    {"rsplit", m_rsplit},
    {"rstrip", m_rstrip},
    {"split", m_split},
    {"splitlines", m_splitlines},
    {"startswith", m_startswith},
    {"strip", m_strip},
    {"swapcase", m_swapcase},
    {"title", m_title},
    {"upper", m_upper},
    {"zfill", m_zfill},
};

constexpr MethodEntry kDictMethods[] = {
    {"copy", m_copy},      {"get", m_dict_get},       {"items", m_dict_items},
    {"keys", m_dict_keys}, {"values", m_dict_values},
};

constexpr MethodEntry kListMethods[] = {
    {"count", m_list_count},
    {"index", m_list_index},
};

// Mutating methods: jinja2's ImmutableSandboxedEnvironment refuses them.
constexpr std::string_view kMutatingDictMethods[] = {"clear", "pop", "popitem", "setdefault",
                                                     "update"};
constexpr std::string_view kMutatingListMethods[] = {"append", "clear",  "extend",  "insert",
                                                     "pop",    "remove", "reverse", "sort"};

template <typename Entries>
std::optional<Value> find_method(const Entries& entries, const Value& self, std::string_view name) {
  for (const auto& e : entries) {
    if (e.name == name) return bind_method(self, name, e.fn);
  }
  return std::nullopt;
}

template <typename Names>
bool contains_name(const Names& names, std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value unsafe_attribute(const Value& self, std::string_view name) {
  return Value::undefined("access to attribute " + pystr::repr(name) + " of " +
                          pystr::repr(type_name(self)) + " object is unsafe.");
}

// ---- globals ---------------------------------------------------------------

// jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

Value g_range(Renderer& r, CallArgs& a) {
  if (!a.keyword.empty()) throw_runtime("range() takes no keyword arguments");
  if (a.positional.empty() || a.positional.size() > 3) {
    throw_runtime("range expected at most 3 arguments, got " + std::to_string(a.positional.size()));
  }
  int64_t start = 0;
  int64_t stop;
  int64_t step = 1;
  if (a.positional.size() == 1) {
    stop = int_arg(a.positional[0], "range");
  } else {
    start = int_arg(a.positional[0], "range");
    stop = int_arg(a.positional[1], "range");
    if (a.positional.size() == 3) step = int_arg(a.positional[2], "range");
  }
  if (step == 0) throw_runtime("range() arg 3 must not be zero");
  const double count = step > 0 ? std::ceil((static_cast<double>(stop) - start) / step)
                                : std::ceil((static_cast<double>(start) - stop) / -step);
  if (count > kMaxRange) {
    throw_runtime("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.emplace_back(i);
  return r.make_list(std::move(items));
}

Dict dict_from_args(CallArgs& a, const char* fn) {
  Dict d;
  if (a.positional.size() > 1) throw_runtime(std::string(fn) + " expected at most 1 argument");
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().entries()) d.set(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) throw_runtime(std::string(fn) + ": sequence elements must be pairs");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.keyword) d.set(Value(k), v);
  return d;
}

Value g_dict(Renderer&, CallArgs& a) { return Value(dict_from_args(a, "dict")); }

Value g_namespace(Renderer& r, CallArgs& a) {
  auto ns =
      std::static_pointer_cast<Object>(std::make_shared<Namespace>(dict_from_args(a, "namespace")));
  r.track(ns);
  return Value(std::move(ns));
}

Value g_raise_exception(Renderer&, CallArgs& a) {
  std::string message = a.positional.empty() ? std::string() : to_str(a.positional[0]);
  throw_error(Error::Kind::raised, std::move(message));
}

Value g_strftime_now(Renderer& r, CallArgs& a) {
  Params p("strftime_now", a, {"format"});
  const std::string& format = str_arg(p.required(0, "strftime_now"), "format");
  const std::time_t t = r.now();
  std::tm local{};
  localtime_r(&t, &local);
  std::string out(256 + format.size() * 8, '\0');
  const size_t n =
      format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
  out.resize(n);
  return r.make_string(std::move(out));
}

// joiner(sep=", "): returns "" the first time it is called, then sep.
Value g_joiner(Renderer&, CallArgs& a) {
  Params p("joiner", a, {"sep"});
  static const Value kComma{std::string(", ")};
  auto used = std::make_shared<bool>(false);
  Value sep = p.get(0, kComma);
  return Value(std::make_shared<const Callable>(
      Callable{"joiner", [used, sep](Renderer&, CallArgs&) -> Value {
                 if (!*used) {
                   *used = true;
                   return Value(std::string());
                 }
                 return sep;
               }}));
}

struct GlobalEntry {
  std::string_view name;
  Value (*fn)(Renderer&, CallArgs&);
};

constexpr GlobalEntry kGlobals[] = {
    {"dict", g_dict},           {"joiner", g_joiner},
    {"namespace", g_namespace}, {"raise_exception", g_raise_exception},
    {"range", g_range},         {"strftime_now", g_strftime_now},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

bool is_unsupported_jinja2_filter(std::string_view name) {
  return contains_name(kUnsupportedFilters, name);
}

bool is_unsupported_jinja2_test(std::string_view) { return false; }

std::optional<Value> builtin_method(const Value& receiver, std::string_view name) {
  if (receiver.is_string()) return find_method(kStrMethods, receiver, name);
  if (receiver.is_dict()) {
    if (auto m = find_method(kDictMethods, receiver, name)) return m;
    if (contains_name(kMutatingDictMethods, name)) return unsafe_attribute(receiver, name);
    return std::nullopt;
  }
  if (receiver.is_list()) {
    if (auto m = find_method(kListMethods, receiver, name)) return m;
    if (!receiver.list().is_tuple) {
      if (name == "copy") return bind_method(receiver, name, m_copy);
      if (contains_name(kMutatingListMethods, name)) return unsafe_attribute(receiver, name);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<Value> builtin_global(std::string_view name) {
  for (const auto& g : kGlobals) {
    if (g.name == name) {
      auto fn = g.fn;
      return Value(std::make_shared<const Callable>(
          Callable{std::string(g.name), [fn](Renderer& r, CallArgs& a) { return fn(r, a); }}));
    }
  }
  return std::nullopt;
}

bool apply_test(Renderer& r, std::string_view name, const Value& input, CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) throw_runtime("No test named '" + std::string(name) + "'.");
  return fn(r, input, args);
}

Value apply_filter(Renderer& r, std::string_view name, const Value& input, CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) throw_runtime("No filter named '" + std::string(name) + "'.");
  return fn(r, input, args);
}

}  // namespace vpod::tokenizer::jinja
