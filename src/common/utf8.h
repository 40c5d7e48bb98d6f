// UTF-8, once for the whole program: decoding one code point, validation
// (no overlongs, surrogates or values past U+10FFFF), counting code points
// (OpenAI's text_offset unit, Python's len(str)), and Rust's
// String::from_utf8_lossy, which the tokenizer's decoders and the server's
// token bytes both need: one U+FFFD per maximal invalid subpart, as Python's
// bytes.decode(errors="replace") does too.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vpod::utf8 {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the sequence a lead byte announces (1 for ASCII and for bytes that
// cannot start a sequence).
inline std::size_t sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point starting at text[pos] and advances pos past it.
// Precondition: text is valid UTF-8 and pos < text.size().
char32_t decode(std::string_view text, std::size_t& pos);

// Appends the UTF-8 encoding of cp (a valid scalar value).
void append(std::string& out, char32_t cp);

// Length of the longest valid UTF-8 prefix of bytes, and whether it is all.
std::size_t valid_prefix_length(std::string_view bytes);
inline bool is_valid(std::string_view bytes) { return valid_prefix_length(bytes) == bytes.size(); }

// Number of code points in valid UTF-8 text.
std::size_t count_chars(std::string_view text);

// Rust's String::from_utf8_lossy.
std::string lossy(std::string_view bytes);

}  // namespace vpod::utf8
