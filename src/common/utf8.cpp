// UTF-8 (utf8.h): decoding, encoding, validation, code-point counting and the
// lossy conversion, each written once for the whole program.

#include "common/utf8.h"

#include <cstdint>

namespace vpod::utf8 {
namespace {

// Length of the valid sequence at bytes[pos], or 0 if it is invalid; on
// failure *invalid_length is the length of the maximal subpart to replace.
std::size_t valid_sequence_at(std::string_view bytes, std::size_t pos,
                              std::size_t* invalid_length) {
  const auto b0 = static_cast<unsigned char>(bytes[pos]);
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong encodings
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong encodings
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *invalid_length = 1;
    return 0;
  }
  for (std::size_t k = 1; k < need; ++k) {
    if (pos + k >= bytes.size()) {
      *invalid_length = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(bytes[pos + k]);
    const unsigned char min = k == 1 ? lo : 0x80;
    const unsigned char max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) {
      *invalid_length = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

char32_t decode(std::string_view text, std::size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  const std::size_t n = sequence_length(b0);
  char32_t cp;
  switch (n) {
    case 1: cp = b0; break;
    case 2: cp = b0 & 0x1F; break;
    case 3: cp = b0 & 0x0F; break;
    default: cp = b0 & 0x07; break;
  }
  for (std::size_t k = 1; k < n && pos + k < text.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  }
  pos += n;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::size_t valid_prefix_length(std::string_view bytes) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= bytes.size()) {
      std::uint64_t word;
      __builtin_memcpy(&word, bytes.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= bytes.size()) break;
    std::size_t invalid = 0;
    const std::size_t n = valid_sequence_at(bytes, pos, &invalid);
    if (n == 0) return pos;
    pos += n;
  }
  return bytes.size();
}

std::size_t count_chars(std::string_view text) {
  std::size_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

std::string lossy(std::string_view bytes) {
  const std::size_t valid = valid_prefix_length(bytes);
  if (valid == bytes.size()) return std::string(bytes);
  std::string out(bytes.substr(0, valid));
  std::size_t pos = valid;
  while (pos < bytes.size()) {
    std::size_t invalid = 0;
    const std::size_t n = valid_sequence_at(bytes, pos, &invalid);
    if (n == 0) {
      out += kReplacementChar;
      pos += invalid;
    } else {
      out.append(bytes.data() + pos, n);
      pos += n;
    }
  }
  return out;
}

}  // namespace vpod::utf8
