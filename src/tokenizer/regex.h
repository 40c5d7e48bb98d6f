// Regular expressions for normalizers, pre-tokenizers and decoders, on PCRE2
// (UTF, UCP, JIT). Hugging Face's tokenizers use Oniguruma; the few places
// where the two disagree (\s, \w, \h) are translated when compiling, and
// find_all iterates exactly like the Rust onig crate's find_iter, empty
// matches included.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace vpod::tokenizer {

// One match or one stretch between matches: [begin, end) in bytes.
struct MatchSpan {
  std::uint32_t begin;
  std::uint32_t end;
  bool is_match;
};

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern (as found in tokenizer.json).
  static Result<Regex> compile(std::string_view pattern);
  // A pattern matching `text` literally (tokenizers' String patterns; an
  // empty one matches nothing).
  static Result<Regex> literal(std::string_view text);

  // Appends to `out` the spans covering `text` (valid UTF-8): matches and the
  // stretches between them, in order, like tokenizers' Pattern::find_matches.
  // An empty text gives one empty non-match. Fails only if PCRE2 does (e.g.
  // its JIT stack runs out on a pathological input).
  Status find_matches(std::string_view text, std::vector<MatchSpan>& out) const;

  // Start of the first match at or after `from`, and its end, or false.
  Result<bool> search(std::string_view text, std::size_t from, std::size_t* begin,
                      std::size_t* end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
  bool is_literal_ = false;  // pattern_ is plain text: matched with find(), no PCRE2
};

// Rewrites the Oniguruma escapes whose PCRE2 meaning differs (\s, \S: the
// Unicode White_Space property; \w: Alphabetic, marks, decimal digits and
// connector punctuation; \h: a hex digit). Exposed for tests.
Result<std::string> translate_oniguruma_pattern(std::string_view pattern);

}  // namespace vpod::tokenizer
