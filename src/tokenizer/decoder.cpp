// The decoders (decoder.h): each supported decoder's decode_chain step.

#include "tokenizer/decoder.h"

#include "common/utf8.h"

namespace vpod::tokenizer {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

int byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  // u8::from_str_radix(.., 16) also accepts a leading '+'.
  if (token[3] == '+') return hex_digit(token[4]);
  const int hi = hex_digit(token[3]);
  const int lo = hex_digit(token[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

Status ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::string bytes;
  for (const std::string& token : tokens) {
    // A token with any character outside the alphabet is kept as it is.
    const std::size_t start = bytes.size();
    std::size_t pos = 0;
    bool mapped = true;
    while (pos < token.size()) {
      const int byte = alphabet.byte_of(utf8::decode(token, pos));
      if (byte < 0) {
        mapped = false;
        break;
      }
      bytes.push_back(static_cast<char>(byte));
    }
    if (!mapped) {
      bytes.resize(start);
      bytes += token;
    }
  }
  tokens.assign(1, utf8::lossy(bytes));
  return {};
}

Status ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& token : tokens) {
    VPOD_ASSIGN_OR_RETURN(token, replace_.replace(token));
  }
  return {};
}

Status ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    if (utf8::is_valid(run)) {
      out.push_back(run);
    } else {
      for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back(utf8::kReplacementChar);
    }
    run.clear();
  };
  for (std::string& token : tokens) {
    const int byte = byte_fallback_value(token);
    if (byte >= 0) {
      run.push_back(static_cast<char>(byte));
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  tokens = std::move(out);
  return {};
}

Status FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string joined;
  for (const std::string& token : tokens) joined += token;
  tokens.assign(1, std::move(joined));
  return {};
}

Status StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& token : tokens) {
    std::vector<std::size_t> starts;  // byte offset of each character, plus the end
    for (std::size_t pos = 0; pos < token.size();) {
      starts.push_back(pos);
      pos += utf8::sequence_length(static_cast<unsigned char>(token[pos]));
    }
    const std::size_t n = starts.size();
    starts.push_back(token.size());
    auto char_at = [&](std::size_t i) {
      std::size_t pos = starts[i];
      return utf8::decode(token, pos);
    };
    std::size_t start_cut = 0;
    for (std::size_t i = 0; i < std::min(start_, n); ++i) {
      if (char_at(i) != content_) break;
      start_cut = i + 1;
    }
    std::size_t stop_cut = n;
    for (std::size_t i = 0; i < std::min(stop_, n); ++i) {
      const std::size_t index = n - i - 1;
      if (char_at(index) != content_) break;
      stop_cut = index;
    }
    if (stop_cut < start_cut) stop_cut = start_cut;
    token = token.substr(starts[start_cut], starts[stop_cut] - starts[start_cut]);
  }
  return {};
}

Status MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const bool drop = i == 0 && scheme_ != PrependScheme::never;
    std::string out;
    const std::string& token = tokens[i];
    for (std::size_t pos = 0; pos < token.size();) {
      const std::size_t begin = pos;
      const char32_t cp = utf8::decode(token, pos);
      if (cp == replacement_) {
        if (!drop) out += ' ';
      } else {
        out.append(token, begin, pos - begin);
      }
    }
    tokens[i] = std::move(out);
  }
  return {};
}

Status SequenceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (const auto& step : steps_) VPOD_RETURN_IF_ERROR(step->decode_chain(tokens));
  return {};
}

bool SequenceDecoder::groups_byte_tokens() const {
  for (const auto& step : steps_) {
    if (step->groups_byte_tokens()) return true;
  }
  return false;
}

}  // namespace vpod::tokenizer
