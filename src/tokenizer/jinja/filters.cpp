// jinja2's built-in filters on sequences and mappings, Hugging Face's tojson
// (json.dumps with ensure_ascii=False), and the table of every filter
// (the string and number ones are in filters_scalar.cpp).
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/utf8.h"
#include "tokenizer/jinja/builtin_args.h"
#include "tokenizer/jinja/filters_scalar.h"
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

// The string and number filters are in filters_scalar.cpp.
using namespace detail;

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
