// The pre-tokenizers (pre_tokenizer.h): regex and string splits with each
// delimiter behaviour, the ByteLevel alphabet, Metaspace and Sequence.

#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "common/utf8.h"

namespace vpod::tokenizer {

void apply_split_behavior(const std::vector<MatchSpan>& spans, SplitBehavior behavior,
                          std::vector<MatchSpan>& ranges) {
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const MatchSpan& s : spans) ranges.push_back({s.begin, s.end, false});
      return;
    case SplitBehavior::removed:
      for (const MatchSpan& s : spans) {
        if (!s.is_match) ranges.push_back({s.begin, s.end, false});
      }
      return;
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      for (const MatchSpan& s : spans) {
        if (s.is_match == previous_match && !ranges.empty()) {
          ranges.back().end = s.end;
        } else {
          ranges.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      return;
    }
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const MatchSpan& s : spans) {
        if (s.is_match && !previous_match && !ranges.empty()) {
          ranges.back().end = s.end;
        } else {
          ranges.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      return;
    }
    case SplitBehavior::merged_with_next: {
      // Walks backwards, then restores the order.
      const std::size_t first = ranges.size();
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && ranges.size() > first) {
          ranges.back().begin = it->begin;
        } else {
          ranges.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(ranges.begin() + static_cast<std::ptrdiff_t>(first), ranges.end());
      return;
    }
  }
}

namespace {

// Appends the non-empty sub-pieces of `piece` that `ranges` select.
void append_ranges(const Piece& piece, const std::vector<MatchSpan>& ranges,
                   std::vector<Piece>& out) {
  for (const MatchSpan& r : ranges) {
    if (r.begin == r.end) continue;
    out.push_back(Piece{piece.text.substr(r.begin, r.end - r.begin),
                        piece.at_original_start && r.begin == 0});
  }
}

Status split_pieces(const Regex& pattern, SplitBehavior behavior, bool invert,
                    std::vector<Piece>& pieces) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  std::vector<MatchSpan> spans;
  std::vector<MatchSpan> ranges;
  for (const Piece& piece : pieces) {
    spans.clear();
    ranges.clear();
    VPOD_RETURN_IF_ERROR(pattern.find_matches(piece.text, spans));
    if (invert) {
      for (MatchSpan& s : spans) s.is_match = !s.is_match;
    }
    apply_split_behavior(spans, behavior, ranges);
    append_ranges(piece, ranges, out);
  }
  pieces = std::move(out);
  return {};
}

}  // namespace

Status SplitPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  return split_pieces(pattern_, behavior_, invert_, pieces);
}

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet = [] {
    ByteLevelAlphabet a;
    a.char_to_byte.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the others take the code
    // points from 256 up, in byte order (GPT-2's bytes_to_unicode).
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const int cp = printable(b) ? b : next++;
      std::string s;
      utf8::append(s, static_cast<char32_t>(cp));
      a.byte_to_char[b] = s;
      a.char_to_byte[cp] = b;
    }
    return a;
  }();
  return alphabet;
}

void ByteLevelAlphabet::append_mapped(std::string_view bytes, std::string& out) const {
  for (const char c : bytes) out += byte_to_char[static_cast<unsigned char>(c)];
}

Result<std::unique_ptr<ByteLevelPreTokenizer>> ByteLevelPreTokenizer::create(bool add_prefix_space,
                                                                             bool use_regex) {
  VPOD_ASSIGN_OR_RETURN(Regex gpt2, Regex::compile(kGpt2Pattern));
  return std::unique_ptr<ByteLevelPreTokenizer>(
      new ByteLevelPreTokenizer(add_prefix_space, use_regex, std::move(gpt2)));
}

Status ByteLevelPreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  if (add_prefix_space_) {
    for (Piece& piece : pieces) {
      if (piece.text.empty() || piece.text[0] != ' ') piece.text.insert(0, 1, ' ');
    }
  }
  if (use_regex_) {
    VPOD_RETURN_IF_ERROR(split_pieces(gpt2_, SplitBehavior::isolated, false, pieces));
  }
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
  std::string mapped;
  for (Piece& piece : pieces) {
    mapped.clear();
    alphabet.append_mapped(piece.text, mapped);
    piece.text.swap(mapped);
  }
  return {};
}

MetaspacePreTokenizer::MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
    : scheme_(scheme), split_(split) {
  utf8::append(replacement_, replacement);
}

Status MetaspacePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 4);
  std::string replaced;
  for (Piece& piece : pieces) {
    replaced.clear();
    for (const char c : piece.text) {
      if (c == ' ') {
        replaced += replacement_;
      } else {
        replaced += c;
      }
    }
    const bool starts_with_replacement =
        replaced.compare(0, replacement_.size(), replacement_) == 0;
    const bool prepend =
        !starts_with_replacement && (scheme_ == PrependScheme::always ||
                                     (scheme_ == PrependScheme::first && piece.at_original_start));
    if (prepend) replaced.insert(0, replacement_);
    if (!split_) {
      if (!replaced.empty()) out.push_back(Piece{replaced, piece.at_original_start});
      continue;
    }
    // Split on each replacement character, merged with what follows it.
    std::vector<MatchSpan> spans;
    std::size_t last = 0;
    std::size_t pos = 0;
    while ((pos = replaced.find(replacement_, pos)) != std::string::npos) {
      if (last < pos)
        spans.push_back({static_cast<std::uint32_t>(last), static_cast<std::uint32_t>(pos), false});
      spans.push_back({static_cast<std::uint32_t>(pos),
                       static_cast<std::uint32_t>(pos + replacement_.size()), true});
      pos += replacement_.size();
      last = pos;
    }
    if (last < replaced.size()) {
      spans.push_back(
          {static_cast<std::uint32_t>(last), static_cast<std::uint32_t>(replaced.size()), false});
    }
    std::vector<MatchSpan> ranges;
    apply_split_behavior(spans, SplitBehavior::merged_with_next, ranges);
    append_ranges(Piece{replaced, piece.at_original_start}, ranges, out);
  }
  pieces = std::move(out);
  return {};
}

Status SequencePreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  for (const auto& step : steps_) VPOD_RETURN_IF_ERROR(step->pre_tokenize(pieces));
  return {};
}

}  // namespace vpod::tokenizer
