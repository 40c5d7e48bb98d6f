// The Jinja lexer (lexer.h): tokenizing a template's text, tags and literals
// with jinja2's whitespace control.

#include "tokenizer/jinja/lexer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include "common/utf8.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/value.h"

namespace vpod::tokenizer::jinja {

namespace {

[[noreturn]] void fail(std::string message, int line) {
  throw_error(Error::Kind::syntax, std::move(message), line);
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Length of the Python-whitespace run (re's \s) starting at `pos`.
size_t space_run(std::string_view s, size_t pos) {
  size_t i = pos;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (!pystr::is_space(c)) break;
      ++i;
      continue;
    }
    size_t next = i;
    if (!pystr::is_space(utf8::decode(s, next))) break;
    i = next;
  }
  return i - pos;
}

// Python's str.rstrip() with no argument.
std::string_view rstrip_space(std::string_view s) {
  // Walk code points from the start, remembering where the trailing run of
  // whitespace begins.
  size_t keep = 0;
  size_t i = 0;
  while (i < s.size()) {
    const size_t run = space_run(s, i);
    if (run > 0) {
      i += run;
      continue;
    }
    // One non-space code point.
    i = std::min(s.size(), i + utf8::sequence_length(static_cast<unsigned char>(s[i])));
    keep = i;
  }
  return s.substr(0, keep);
}

// Digits with optional single underscores between them ((\d+_)*\d+), from pos.
size_t digit_run(std::string_view s, size_t pos) {
  size_t i = pos;
  if (i >= s.size() || !is_digit(s[i])) return 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  while (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  return i - pos;
}

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != '_') out.push_back(c);
  }
  return out;
}

// Decodes a string literal's body like jinja2: non-ASCII characters become
// backslash escapes, then Python's unicode-escape codec decodes everything.
std::string decode_string_literal(std::string_view body, int line) {
  std::string ascii;
  for (char32_t cp : pystr::decode(body)) {
    if (cp < 0x80) {
      ascii.push_back(static_cast<char>(cp));
      continue;
    }
    pystr::append_escape(ascii, cp);
  }
  std::string out;
  size_t i = 0;
  auto hex_escape = [&](int digits, const char* what) {
    if (i + digits > ascii.size()) fail(std::string("truncated ") + what + " escape", line);
    char32_t cp = 0;
    for (int k = 0; k < digits; ++k) {
      const char c = ascii[i + k];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        fail(std::string("truncated ") + what + " escape", line);
      }
      cp = cp * 16 + d;
    }
    i += digits;
    if (cp > 0x10FFFF) fail("illegal Unicode character", line);
    if (cp >= 0xD800 && cp <= 0xDFFF) fail("surrogate code points are not supported", line);
    utf8::append(out, cp);
  };
  while (i < ascii.size()) {
    const char c = ascii[i++];
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (i >= ascii.size()) fail("\\ at end of string", line);
    const char e = ascii[i++];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': hex_escape(2, "\\xXX"); break;
      case 'u': hex_escape(4, "\\uXXXX"); break;
      case 'U': hex_escape(8, "\\UXXXXXXXX"); break;
      case 'N': fail("\\N{...} escapes are not supported", line);
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = e - '0';
          for (int k = 0; k < 2 && i < ascii.size() && ascii[i] >= '0' && ascii[i] <= '7'; ++k) {
            cp = cp * 8 + (ascii[i++] - '0');
          }
          utf8::append(out, cp);
        } else {
          // Python keeps unknown escapes verbatim.
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options) : options_(options) {
    // Newlines are normalized to \n, and one trailing newline is dropped.
    source_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        source_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        source_.push_back(source[i]);
      }
    }
    if (!options_.keep_trailing_newline && !source_.empty() && source_.back() == '\n') {
      source_.pop_back();
    }
  }

  std::vector<Token> run() {
    const std::string_view s = source_;
    while (pos_ < s.size()) {
      const std::optional<size_t> tag = find_tag(pos_);
      if (!tag) {
        emit_data(s.substr(pos_));
        advance_to(s.size());
        break;
      }
      lex_text_and_tag(*tag);
    }
    tokens_.push_back(Token{TokenType::eof, "", 0, 0.0, line_});
    return std::move(tokens_);
  }

 private:
  enum class TagKind { comment, block, variable, raw };

  // First position >= from where "{{", "{%" or "{#" starts.
  std::optional<size_t> find_tag(size_t from) const {
    const std::string_view s = source_;
    for (size_t i = s.find('{', from); i != std::string_view::npos; i = s.find('{', i + 1)) {
      if (i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) return i;
    }
    return std::nullopt;
  }

  // Matches {%[-+]?\s*raw\s*(-%}\s*|%}) at pos; returns its length.
  size_t match_raw_begin(size_t pos) const {
    const std::string_view s = source_;
    if (s.compare(pos, 2, "{%") != 0) return 0;
    size_t i = pos + 2;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    i += space_run(s, i);
    if (s.compare(i, 3, "raw") != 0) return 0;
    i += 3;
    i += space_run(s, i);
    if (s.compare(i, 3, "-%}") == 0) return i + 3 + space_run(s, i + 3) - pos;
    if (s.compare(i, 2, "%}") == 0) return i + 2 - pos;
    return 0;
  }

  void advance_to(size_t new_pos) {
    line_ += count_newlines(std::string_view(source_).substr(pos_, new_pos - pos_));
    pos_ = new_pos;
  }

  void emit(TokenType type, std::string text, int line) {
    tokens_.push_back(Token{type, std::move(text), 0, 0.0, line});
  }

  void emit_data(std::string_view text) {
    if (!text.empty()) emit(TokenType::data, std::string(text), line_);
  }

  // Applies `-` (strip all whitespace), `+` (keep) or lstrip_blocks to the
  // text before a tag. `line_starting_` is jinja2's flag: the previous match
  // ended with a newline (or this is the start of the template). lstrip
  // removes the text after the last newline when it is all whitespace
  // (jinja2 3.1 tests it with re's \s+, so any Unicode whitespace).
  std::string_view strip_before_tag(std::string_view text, char sign, bool is_variable) const {
    if (sign == '-') return rstrip_space(text);
    if (sign == '+' || !options_.lstrip_blocks || is_variable) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos > 0 || line_starting_) {
      const size_t tail = text.size() - l_pos;
      if (tail > 0 && space_run(text, l_pos) == tail) return text.substr(0, l_pos);
    }
    return text;
  }

  void lex_text_and_tag(size_t tag_pos) {
    const std::string_view s = source_;
    const std::string_view text = s.substr(pos_, tag_pos - pos_);
    TagKind kind;
    size_t raw_len = 0;
    if (s[tag_pos + 1] == '%' && (raw_len = match_raw_begin(tag_pos)) > 0) {
      kind = TagKind::raw;
    } else if (s[tag_pos + 1] == '#') {
      kind = TagKind::comment;
    } else if (s[tag_pos + 1] == '%') {
      kind = TagKind::block;
    } else {
      kind = TagKind::variable;
    }
    const char sign = tag_pos + 2 < s.size() && (s[tag_pos + 2] == '-' || s[tag_pos + 2] == '+')
                          ? s[tag_pos + 2]
                          : '\0';
    emit_data(strip_before_tag(text, sign, kind == TagKind::variable));
    advance_to(tag_pos);
    const int tag_line = line_;
    const size_t opener_end = tag_pos + 2 + (sign ? 1 : 0);
    switch (kind) {
      case TagKind::comment: lex_comment(opener_end, tag_line); break;
      case TagKind::raw: lex_raw(tag_pos + raw_len, tag_line); break;
      case TagKind::block:
        emit(TokenType::block_begin, "{%", tag_line);
        advance_to(opener_end);
        line_starting_ = false;
        lex_tag_contents(/*is_block=*/true);
        break;
      case TagKind::variable:
        emit(TokenType::variable_begin, "{{", tag_line);
        advance_to(opener_end);
        line_starting_ = false;
        lex_tag_contents(/*is_block=*/false);
        break;
    }
  }

  // Length of a block-end match at i ("+%}", "-%}\s*", "%}\n?"), or 0.
  size_t match_block_end(size_t i) const {
    const std::string_view s = source_;
    if (s.compare(i, 3, "+%}") == 0) return 3;
    if (s.compare(i, 3, "-%}") == 0) return 3 + space_run(s, i + 3);
    if (s.compare(i, 2, "%}") == 0) {
      return 2 + (options_.trim_blocks && i + 2 < s.size() && s[i + 2] == '\n' ? 1 : 0);
    }
    return 0;
  }

  void finish_match(size_t end) {
    line_starting_ = end > 0 && source_[end - 1] == '\n';
    advance_to(end);
  }

  void lex_comment(size_t from, int tag_line) {
    const std::string_view s = source_;
    for (size_t i = from; i < s.size(); ++i) {
      size_t len = 0;
      if (s.compare(i, 3, "+#}") == 0) {
        len = 3;
      } else if (s.compare(i, 3, "-#}") == 0) {
        len = 3 + space_run(s, i + 3);
      } else if (s.compare(i, 2, "#}") == 0) {
        len = 2 + (options_.trim_blocks && i + 2 < s.size() && s[i + 2] == '\n' ? 1 : 0);
      }
      if (len > 0) {
        finish_match(i + len);
        return;
      }
    }
    fail("Missing end of comment tag", tag_line);
  }

  void lex_raw(size_t body_start, int tag_line) {
    const std::string_view s = source_;
    advance_to(body_start);
    line_starting_ = body_start > 0 && s[body_start - 1] == '\n';
    for (size_t i = s.find("{%", body_start); i != std::string_view::npos;
         i = s.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = '\0';
      if (j < s.size() && (s[j] == '-' || s[j] == '+')) sign = s[j++];
      j += space_run(s, j);
      if (s.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      j += space_run(s, j);
      const size_t end_len = match_block_end(j);
      if (end_len == 0) continue;
      // The raw body is data; lstrip applies before {% endraw %}.
      const std::string_view body = s.substr(body_start, i - body_start);
      emit_data(strip_before_tag(body, sign, /*is_variable=*/false));
      finish_match(j + end_len);
      return;
    }
    fail("Missing end of raw directive", tag_line);
  }

  void lex_tag_contents(bool is_block) {
    const std::string_view s = source_;
    std::vector<char> balancing;  // expected closing brackets
    while (pos_ < s.size()) {
      if (balancing.empty()) {
        if (is_block) {
          if (const size_t len = match_block_end(pos_)) {
            emit(TokenType::block_end, "%}", line_);
            finish_match(pos_ + len);
            return;
          }
        } else {
          if (s.compare(pos_, 3, "-}}") == 0) {
            emit(TokenType::variable_end, "}}", line_);
            finish_match(pos_ + 3 + space_run(s, pos_ + 3));
            return;
          }
          if (s.compare(pos_, 2, "}}") == 0) {
            emit(TokenType::variable_end, "}}", line_);
            finish_match(pos_ + 2);
            return;
          }
        }
      }
      if (const size_t ws = space_run(s, pos_)) {
        finish_match(pos_ + ws);
        continue;
      }
      if (lex_number() || lex_name() || lex_string()) {
        line_starting_ = false;
        continue;
      }
      lex_operator(balancing);
      line_starting_ = false;
    }
    // End of input inside a tag: the parser reports what it was looking for.
  }

  bool lex_number() {
    const std::string_view s = source_;
    const size_t start = pos_;
    if (!is_digit(s[start])) return false;
    // Floats first, as jinja2's rule order does; a float cannot follow a '.'.
    if (start == 0 || s[start - 1] != '.') {
      size_t i = start + digit_run(s, start);
      size_t end = 0;
      size_t frac = 0;
      if (i < s.size() && s[i] == '.' && (frac = digit_run(s, i + 1)) > 0) {
        end = i + 1 + frac;
      }
      size_t exp_at = end ? end : i;
      if (exp_at < s.size() && (s[exp_at] == 'e' || s[exp_at] == 'E')) {
        size_t j = exp_at + 1;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        if (const size_t exp_digits = digit_run(s, j)) end = j + exp_digits;
      }
      if (end) {
        const std::string text = without_underscores(s.substr(start, end - start));
        double value = 0.0;
        // from_chars is locale-independent; out of range means inf or 0 as in Python.
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec == std::errc::result_out_of_range) {
          const bool negative_exponent =
              text.find("e-") != std::string::npos || text.find("E-") != std::string::npos;
          value = negative_exponent ? 0.0 : HUGE_VAL;
        }
        Token t{TokenType::floating, text, 0, value, line_};
        tokens_.push_back(std::move(t));
        advance_to(end);
        return true;
      }
    }
    // Integers: 0b/0o/0x prefixes, [1-9](_?\d)*, or 0(_?0)*.
    int base = 10;
    size_t i = start;
    size_t digits_start = start;
    auto is_base_digit = [&](char c) {
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 16) {
        return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      }
      return is_digit(c);
    };
    if (s[start] == '0' && start + 1 < s.size() &&
        (s[start + 1] == 'b' || s[start + 1] == 'B' || s[start + 1] == 'o' || s[start + 1] == 'O' ||
         s[start + 1] == 'x' || s[start + 1] == 'X')) {
      const char p = static_cast<char>(s[start + 1] | 0x20);
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      i = digits_start = start + 2;
      // (_?digit)+
      while (true) {
        if (i < s.size() && is_base_digit(s[i])) {
          ++i;
        } else if (i + 1 < s.size() && s[i] == '_' && is_base_digit(s[i + 1])) {
          i += 2;
        } else {
          break;
        }
      }
      if (i == digits_start) {
        base = 10;  // just "0"; the letter lexes as a name next
        i = start + 1;
        digits_start = start;
      }
    } else if (s[start] == '0') {
      i = start + 1;
      while (true) {
        if (i < s.size() && s[i] == '0') {
          ++i;
        } else if (i + 1 < s.size() && s[i] == '_' && s[i + 1] == '0') {
          i += 2;
        } else {
          break;
        }
      }
    } else {
      i = start + 1;
      while (true) {
        if (i < s.size() && is_digit(s[i])) {
          ++i;
        } else if (i + 1 < s.size() && s[i] == '_' && is_digit(s[i + 1])) {
          i += 2;
        } else {
          break;
        }
      }
    }
    const std::string digits = without_underscores(s.substr(digits_start, i - digits_start));
    int64_t value = 0;
    for (char c : digits) {
      const int d = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value)) {
        fail("integer literal " + std::string(s.substr(start, i - start)) + " is too large", line_);
      }
    }
    Token t{TokenType::integer, std::string(s.substr(start, i - start)), value, 0.0, line_};
    tokens_.push_back(std::move(t));
    advance_to(i);
    return true;
  }

  bool lex_name() {
    const std::string_view s = source_;
    if (!is_name_start(s[pos_])) return false;
    size_t i = pos_ + 1;
    while (i < s.size() && is_name_char(s[i])) ++i;
    emit(TokenType::name, std::string(s.substr(pos_, i - pos_)), line_);
    advance_to(i);
    return true;
  }

  bool lex_string() {
    const std::string_view s = source_;
    const char quote = s[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t i = pos_ + 1;
    while (i < s.size() && s[i] != quote) {
      if (s[i] == '\\') {
        if (i + 1 >= s.size()) return false;
        i += 2;
      } else {
        ++i;
      }
    }
    if (i >= s.size()) return false;  // unterminated: reported as an unexpected char
    const int line = line_;
    std::string value = decode_string_literal(s.substr(pos_ + 1, i - pos_ - 1), line);
    emit(TokenType::string, std::move(value), line);
    advance_to(i + 1);
    return true;
  }

  void lex_operator(std::vector<char>& balancing) {
    const std::string_view s = source_;
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoChar) {
      if (s.compare(pos_, 2, op) == 0) {
        emit(TokenType::op, std::string(op), line_);
        advance_to(pos_ + 2);
        return;
      }
    }
    const char c = s[pos_];
    static constexpr std::string_view kOneChar = "+-/*%~[](){}><=.:|,;";
    if (kOneChar.find(c) == std::string_view::npos) {
      std::string shown(1, c);
      if (static_cast<unsigned char>(c) >= 0x80) {
        shown = std::string(s.substr(pos_, utf8::sequence_length(static_cast<unsigned char>(c))));
      }
      fail("unexpected char " + pystr::repr(shown) + " at " + std::to_string(pos_), line_);
    }
    if (c == '(' || c == '[' || c == '{') {
      balancing.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balancing.empty()) fail("unexpected '" + std::string(1, c) + "'", line_);
      const char expected = balancing.back();
      balancing.pop_back();
      if (expected != c) {
        fail("unexpected '" + std::string(1, c) + "', expected '" + std::string(1, expected) + "'",
             line_);
      }
    }
    emit(TokenType::op, std::string(1, c), line_);
    advance_to(pos_ + 1);
  }

  LexerOptions options_;
  std::string source_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace vpod::tokenizer::jinja
