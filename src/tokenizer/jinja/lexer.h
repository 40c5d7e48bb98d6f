// Splits a template into tokens exactly as jinja2's lexer does with
// Hugging Face's settings (trim_blocks, lstrip_blocks): the whitespace that
// `-`, `+`, trim_blocks and lstrip_blocks remove is removed here, so the
// parser only sees data text and tag contents.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vpod::tokenizer::jinja {

enum class TokenType {
  data,            // template text outside tags
  variable_begin,  // {{
  variable_end,    // }}
  block_begin,     // {%
  block_end,       // %}
  name,            // identifiers and keywords (if, in, not, true, ...)
  string,          // a string literal, escapes decoded
  integer,
  floating,
  op,  // an operator or punctuation: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  eof,
};

struct Token {
  TokenType type;
  std::string text;  // data, name, decoded string, or operator spelling
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
};

struct LexerOptions {
  bool trim_blocks = true;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;  // drop spaces and tabs before a block or comment tag on its line
  bool keep_trailing_newline = false;  // jinja2 drops one trailing newline by default
};

// Throws Error (kind syntax) with the line for malformed input.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

}  // namespace vpod::tokenizer::jinja
