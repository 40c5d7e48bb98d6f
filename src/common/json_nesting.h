// A guard run before any JSON parser sees untrusted text (HTTP bodies,
// safetensors headers): a document of a million '[' must be refused without
// recursing, and without building anything.
#pragma once

#include <string_view>

namespace vpod {

// Whether no object or array in `text` nests deeper than `max_depth`
// (brackets inside strings, escapes included, do not count). Linear, no
// allocation; it does not validate the JSON otherwise.
bool json_nesting_within(std::string_view text, int max_depth);

}  // namespace vpod
