// jinja2's built-in filters, with Hugging Face's tojson (json.dumps with
// ensure_ascii=False).
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/utf8.h"
#include "tokenizer/jinja/builtin_args.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/renderer.h"

namespace vpod::tokenizer::jinja {

namespace {

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
      utf8::append(out, cp);
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
  // jinja2's do_map only iterates a truthy value: `0 | map(...)` is empty.
  const bool iterate_input = truthy(v);
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
    if (!iterate_input) return r.make_list({});
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
  if (!iterate_input) return r.make_list({});
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
  if (!truthy(v)) return r.make_list({});  // jinja2 iterates only a truthy value
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
      utf8::append(out, cp);
      at_word_start = true;
      continue;
    }
    utf8::append(out, at_word_start ? pystr::upper_cp(cp) : pystr::lower_cp(cp));
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
    utf8::append(one, cp);
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

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

bool is_unsupported_jinja2_filter(std::string_view name) {
  return contains_name(kUnsupportedFilters, name);
}

Value apply_filter(Renderer& r, std::string_view name, const Value& input, CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) throw_runtime("No filter named '" + std::string(name) + "'.");
  return fn(r, input, args);
}

}  // namespace vpod::tokenizer::jinja
