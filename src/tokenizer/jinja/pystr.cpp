// Python str semantics (pystr.h): the str methods, case mappings, predicates
// and repr that the Jinja engine needs, counted in code points.

#include "tokenizer/jinja/pystr.h"

#include "common/utf8.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace vpod::tokenizer::jinja::pystr {

namespace {

bool is_cased_category(utf8proc_category_t c) {
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_printable(char32_t cp) {
  if (cp == U' ') return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return false;
    default: return true;
  }
}

bool is_line_break(char32_t cp) {
  switch (cp) {
    case U'\n':
    case U'\r':
    case 0x0B:
    case 0x0C:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x85:
    case 0x2028:
    case 0x2029: return true;
    default: return false;
  }
}

template <typename Pred>
bool all_nonempty(std::string_view s, Pred pred) {
  if (s.empty()) return false;
  size_t i = 0;
  while (i < s.size()) {
    if (!pred(utf8::decode(s, i))) return false;
  }
  return true;
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(utf8::decode(s, i));
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) utf8::append(out, cp);
  return out;
}

int64_t length(std::string_view s) { return static_cast<int64_t>(utf8::count_chars(s)); }

void append_escape(std::string& out, char32_t cp) {
  char buf[16];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
  }
  out += buf;
}

bool is_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  // Walks code points in from each end; the middle is copied as bytes.
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t cp) {
    return chars ? set.find(cp) != std::u32string::npos : is_space(cp);
  };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!strippable(utf8::decode(s, next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t next = start;
      if (!strippable(utf8::decode(s, next))) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    // Callers reject an empty separator (ValueError in Python).
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit-- > 0) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit-- > 0 && end >= sep->size()) {
        const size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Runs of whitespace separate; leading/trailing whitespace gives no parts.
  const std::u32string cps = decode(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit-- <= 0) {
        size_t end = cps.size();
        while (end > i && is_space(cps[end - 1])) --end;
        parts.push_back(encode(std::u32string_view(cps).substr(i, end - i)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_space(cps[j])) ++j;
      parts.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
  } else {
    size_t i = cps.size();
    while (true) {
      while (i > 0 && is_space(cps[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit-- <= 0) {
        size_t begin = 0;
        while (begin < i && is_space(cps[begin])) ++begin;
        parts.push_back(encode(std::u32string_view(cps).substr(begin, i - begin)));
        break;
      }
      size_t j = i;
      while (j > 0 && !is_space(cps[j - 1])) --j;
      parts.push_back(encode(std::u32string_view(cps).substr(j, i - j)));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  const std::u32string cps = decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    if (!is_line_break(cps[i])) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (cps[i] == U'\r' && eol < cps.size() && cps[eol] == U'\n') ++eol;
    const size_t end = keepends ? eol : i;
    lines.push_back(encode(std::u32string_view(cps).substr(start, end - start)));
    start = i = eol;
  }
  if (start < cps.size()) lines.push_back(encode(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                    int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_sub.empty()) {
    // Python inserts `new` before every character and at the end.
    size_t i = 0;
    while (i < s.size()) {
      if (count-- > 0) out.append(new_sub);
      const size_t start = i;
      utf8::decode(s, i);
      out.append(s.substr(start, i - start));
    }
    if (count-- > 0) out.append(new_sub);
    return out;
  }
  size_t pos = 0;
  while (count-- > 0) {
    const size_t hit = s.find(old_sub, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_sub);
    pos = hit + old_sub.size();
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool from_right) {
  const size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return length(s.substr(0, hit));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return length(s) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

char32_t upper_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= U'a' && cp <= U'z') ? cp - 32 : cp;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}

char32_t lower_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= U'A' && cp <= U'Z') ? cp + 32 : cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

static char32_t title_cp(char32_t cp) {
  if (cp < 0x80) return upper_cp(cp);
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

static bool is_cased(char32_t cp) { return is_cased_category(category(cp)); }

template <typename F>
static std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) utf8::append(out, f(utf8::decode(s, i)));
  return out;
}

std::string upper(std::string_view s) { return map_cps(s, upper_cp); }
std::string lower(std::string_view s) { return map_cps(s, lower_cp); }

std::string swapcase(std::string_view s) {
  return map_cps(s, [](char32_t cp) {
    const auto c = category(cp);
    if (c == UTF8PROC_CATEGORY_LU) return lower_cp(cp);
    if (c == UTF8PROC_CATEGORY_LL) return upper_cp(cp);
    return cp;
  });
}

std::string title(std::string_view s) {
  bool previous_cased = false;
  return map_cps(s, [&](char32_t cp) {
    const char32_t out = previous_cased ? lower_cp(cp) : title_cp(cp);
    previous_cased = is_cased(cp);
    return out;
  });
}

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_cps(s, [&](char32_t cp) {
    const char32_t out = first ? title_cp(cp) : lower_cp(cp);
    first = false;
    return out;
  });
}

bool is_upper(std::string_view s) {
  bool any_cased = false;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = category(utf8::decode(s, i));
    if (c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) return false;
    any_cased |= c == UTF8PROC_CATEGORY_LU;
  }
  return any_cased;
}

bool is_lower(std::string_view s) {
  bool any_cased = false;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = category(utf8::decode(s, i));
    if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) return false;
    any_cased |= c == UTF8PROC_CATEGORY_LL;
  }
  return any_cased;
}

static bool is_alpha_cp(char32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

static bool is_digit_cp(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; }

bool is_alpha(std::string_view s) { return all_nonempty(s, is_alpha_cp); }
bool is_digit(std::string_view s) { return all_nonempty(s, is_digit_cp); }
bool is_alnum(std::string_view s) {
  return all_nonempty(s, [](char32_t cp) {
    const auto c = category(cp);
    return is_alpha_cp(cp) || c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL ||
           c == UTF8PROC_CATEGORY_NO;
  });
}
bool is_space_str(std::string_view s) { return all_nonempty(s, is_space); }

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t cp = utf8::decode(s, i);
    if (cp == static_cast<char32_t>(quote) || cp == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (!is_printable(cp)) {
      append_escape(out, cp);
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out.push_back(quote);
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: positional when the
  // decimal exponent is in [-4, 16), scientific otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+'), sci.data() + sci.size(),
                  exponent);
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exponent - 1), '0');
      out += digits;
    } else {
      const size_t int_digits = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_digits) {
        out += digits;
        out.append(int_digits - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_digits);
        out.push_back('.');
        out += digits.substr(int_digits);
      }
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp_buf;
  return out;
}

}  // namespace vpod::tokenizer::jinja::pystr
