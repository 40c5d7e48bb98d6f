// Pre-tokenizers: cut normalized text into the pieces the BPE model encodes
// one by one, as Hugging Face tokenizers do: Split (regex or string, with the
// five delimiter behaviours and invert), ByteLevel, Metaspace and Sequence.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/regex.h"

namespace vpod::tokenizer {

// A piece of text on its way to the model.
struct Piece {
  std::string text;
  // True when the piece starts at offset 0 of the caller's input: Metaspace's
  // prepend_scheme "first" only prepends to that piece (tokenizers tests the
  // piece's original offset, not its index).
  bool at_original_start = false;
};

// How Split treats the delimiters it finds (SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Turns the match/non-match spans of a pattern into the ranges to keep, as
// NormalizedString::split does. Ranges may be empty (callers drop those).
void apply_split_behavior(const std::vector<MatchSpan>& spans, SplitBehavior behavior,
                          std::vector<MatchSpan>& ranges);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenized sub-pieces (never empty ones).
  virtual Status pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's byte-to-unicode table: each byte becomes one printable character.
struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_char;  // UTF-8 of the character for each byte
  std::array<int, 324> char_to_byte;          // code point (< 324) -> byte, or -1
  static const ByteLevelAlphabet& get();
  // The byte a character stands for, or -1 if it is not in the alphabet.
  int byte_of(char32_t cp) const { return cp < char_to_byte.size() ? char_to_byte[cp] : -1; }
  void append_mapped(std::string_view bytes, std::string& out) const;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  static Result<std::unique_ptr<ByteLevelPreTokenizer>> create(bool add_prefix_space,
                                                               bool use_regex);
  Status pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, Regex gpt2)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), gpt2_(std::move(gpt2)) {}
  bool add_prefix_space_;
  bool use_regex_;
  Regex gpt2_;
};

enum class PrependScheme { first, always, never };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split);
  Status pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  std::string replacement_;  // UTF-8 of the replacement character
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status pre_tokenize(std::vector<Piece>& pieces) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// The regex GPT-2 (and tokenizers' ByteLevel with use_regex) splits with.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace vpod::tokenizer
