// Python str semantics over UTF-8 strings: Python strings are sequences of
// code points, so len(), indexing, slicing, find() and strip() count code
// points, and whitespace is Unicode whitespace (str.isspace).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vpod::tokenizer::jinja::pystr {

// Strings are valid UTF-8: Template::parse and from_json check it at the
// boundary, and every operation here keeps it (tokenizer/utf8.h decodes).
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
// Number of code points.
int64_t length(std::string_view s);
// Appends \xhh, \uhhhh or \Uhhhhhhhh for `cp`, as Python's repr and
// unicode-escape spell it.
void append_escape(std::string& out, char32_t cp);

// Python's str.isspace() for one code point (also what `\s` matches in re).
bool is_space(char32_t cp);

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                    int64_t count);
// str.find/rfind in code points, -1 when absent.
int64_t find(std::string_view s, std::string_view sub, bool from_right);
int64_t count(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
std::string swapcase(std::string_view s);
bool is_upper(std::string_view s);  // str.isupper(): has a cased char, none lowercase
bool is_lower(std::string_view s);
bool is_alpha(std::string_view s);
bool is_digit(std::string_view s);
bool is_alnum(std::string_view s);
bool is_space_str(std::string_view s);
char32_t upper_cp(char32_t cp);
char32_t lower_cp(char32_t cp);

// repr(str): quotes and escapes like Python.
std::string repr(std::string_view s);
// repr(float) / str(float): shortest round-trip digits, Python's layout.
std::string float_repr(double v);

}  // namespace vpod::tokenizer::jinja::pystr
