// jinja2's filters on one string or number: case, padding, escaping, trim,
// replace, title, wordcount, and the conversions int, float, round, abs, string.
#include "tokenizer/jinja/filters_scalar.h"

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

}  // namespace

namespace detail {

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

Value f_escape(Renderer& r, const Value& v, CallArgs& args) {
  Params p("escape", args, {});
  return r.make_string(html_escape(to_str(v)));
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

Value f_lower(Renderer& r, const Value& v, CallArgs& args) {
  Params p("lower", args, {});
  return r.make_string(pystr::lower(to_str(v)));
}

Value f_upper(Renderer& r, const Value& v, CallArgs& args) {
  Params p("upper", args, {});
  return r.make_string(pystr::upper(to_str(v)));
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

Value f_string(Renderer& r, const Value& v, CallArgs& args) {
  Params p("string", args, {});
  return v.is_string() ? v : r.make_string(to_str(v));
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

Value f_trim(Renderer& r, const Value& v, CallArgs& args) {
  Params p("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (p.has(0) && !p.get(0, kNone).is_none()) chars = str_arg(p.get(0, kNone), "chars");
  return r.make_string(pystr::strip(to_str(v), chars, true, true));
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

}  // namespace detail

}  // namespace vpod::tokenizer::jinja
