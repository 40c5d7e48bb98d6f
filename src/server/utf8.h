// UTF-8 checks the server applies to client input and to token bytes it
// reports (a token may be part of a character).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vpod::server {

// Whether `text` is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool is_valid_utf8(std::string_view text);

// `bytes` with every ill-formed sequence replaced by U+FFFD (one per maximal
// invalid prefix, as Python's bytes.decode(errors="replace") does).
std::string to_valid_utf8(std::string_view bytes);

// Unicode code points in valid UTF-8 `text` (OpenAI's text_offset unit, as
// Python's len(str)).
std::size_t count_code_points(std::string_view text);

}  // namespace vpod::server
