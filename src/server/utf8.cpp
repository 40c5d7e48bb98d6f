#include "server/utf8.h"

#include <cstdint>

namespace vpod::server {
namespace {

// Length of the well-formed sequence at s[i], or 0 when ill-formed; in that
// case `*invalid_len` is the length of its maximal valid prefix (at least 1),
// which Unicode (and Python) replace with one U+FFFD. Table 3-7 of the
// Unicode standard: second-byte ranges depend on the lead byte.
std::size_t sequence_length(const unsigned char* s, std::size_t n, std::size_t i,
                            std::size_t* invalid_len) {
  const unsigned char c = s[i];
  if (c < 0x80) return 1;
  std::size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // valid range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *invalid_len = 1;
    return 0;
  }
  for (std::size_t k = 1; k < len; ++k) {
    const bool in_range =
        i + k < n && (k == 1 ? (s[i + k] >= lo && s[i + k] <= hi) : (s[i + k] & 0xC0) == 0x80);
    if (!in_range) {
      *invalid_len = k;
      return 0;
    }
  }
  return len;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0, bad = 0;
  while (i < text.size()) {
    const std::size_t len = sequence_length(s, text.size(), i, &bad);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0, bad = 0;
  while (i < bytes.size()) {
    const std::size_t len = sequence_length(s, bytes.size(), i, &bad);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += bad;
    } else {
      out.append(bytes.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::size_t count_code_points(std::string_view text) {
  std::size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

}  // namespace vpod::server
