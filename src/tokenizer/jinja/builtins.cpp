// jinja2's built-in tests and globals (with Hugging Face's raise_exception
// and strftime_now), and the Python methods of str, dict and list that
// templates call.
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "tokenizer/jinja/builtin_args.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/renderer.h"

namespace vpod::tokenizer::jinja {

namespace {

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

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
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

}  // namespace vpod::tokenizer::jinja
