// Added tokens (special and normal): found in the input before anything else,
// with tokenizers' rules for lstrip, rstrip, single_word and normalized.
// Tokens with normalized=false are matched in the raw input; tokens with
// normalized=true are matched in each normalized stretch between them, using
// their own normalized content as the pattern.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"

namespace vpod::tokenizer {

struct AddedToken {
  std::string content;
  TokenId id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A stretch of text, [begin, end) in bytes, that is either an added token
// (token >= 0) or text still to be encoded (token == -1).
struct Segment {
  std::uint32_t begin;
  std::uint32_t end;
  TokenId token;
};

// A set of patterns matched leftmost-longest and without overlap, like
// aho-corasick's MatchKind::LeftmostLongest.
class LiteralMatcher {
 public:
  LiteralMatcher();
  void add(std::string_view pattern, int value);
  bool empty() const { return nodes_.size() == 1; }
  // The longest pattern starting at text[pos]: its length and value, or false.
  bool longest_at(std::string_view text, std::size_t pos, std::size_t* length, int* value) const;
  bool may_start_with(unsigned char byte) const { return first_bytes_[byte]; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;  // sorted by byte
    int value = -1;
  };
  std::vector<Node> nodes_;
  std::bitset<256> first_bytes_;
};

class AddedVocabulary {
 public:
  // `tokens` as listed in tokenizer.json; ids are assigned as tokenizers
  // does (see the definition).
  static Result<AddedVocabulary> build(std::vector<AddedToken> tokens, const BpeModel& model,
                                       const Normalizer* normalizer);

  // Splits `text` around the tokens of one set (normalized=false tokens over
  // the raw input, normalized=true ones over a normalized stretch). Appends
  // segments that cover `text` exactly, in order.
  void split(std::string_view text, bool normalized_set, std::vector<Segment>& out) const;

  bool empty() const { return tokens_.empty(); }
  bool has_normalized_tokens() const { return !normalized_matcher_.empty(); }
  // -1 when `content` is not an added token.
  TokenId token_to_id(std::string_view content) const;
  const AddedToken* find_by_id(TokenId id) const;
  // Whether decode(skip_special_tokens) drops `id`. tokenizers decides by
  // the token's string; every string has one id (added tokens found in the
  // model vocab take the model's id), so deciding by id is the same.
  bool is_special_id(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < special_ids_.size() && special_ids_[id];
  }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, TokenId> id_by_content_;
  std::unordered_map<TokenId, std::size_t> index_by_id_;  // into tokens_
  std::unordered_set<std::string> special_contents_;
  std::vector<bool> special_ids_;      // by id
  LiteralMatcher raw_matcher_;         // normalized=false tokens
  LiteralMatcher normalized_matcher_;  // normalized=true tokens, normalized content
  Regex word_char_;                    // Rust regex's \w, for single_word
};

// The Unicode White_Space property (Rust's char::is_whitespace, regex \s).
bool is_white_space(char32_t cp);

}  // namespace vpod::tokenizer
