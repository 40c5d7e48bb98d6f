// Added tokens (added_vocabulary.h): the literal matcher that finds them, and
// splitting input around them with tokenizers' lstrip / rstrip / single_word
// rules.

#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "common/utf8.h"

namespace vpod::tokenizer {

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

namespace {

// Rust regex's Unicode \w: Alphabetic, marks, decimal numbers, connector
// punctuation and the joiners.
constexpr std::string_view kRustWordChar = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])";

// Start of the whitespace run that ends `text` (text.size() if none).
std::size_t trailing_space_start(std::string_view text) {
  std::size_t start = text.size();
  while (start > 0) {
    std::size_t p = start - 1;
    while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
    std::size_t q = p;
    if (!is_white_space(utf8::decode(text, q))) break;
    start = p;
  }
  return start;
}

// Length of the whitespace run that starts `text`.
std::size_t leading_space_length(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t q = pos;
    if (!is_white_space(utf8::decode(text, q))) break;
    pos = q;
  }
  return pos;
}

}  // namespace

LiteralMatcher::LiteralMatcher() : nodes_(1) {}

void LiteralMatcher::add(std::string_view pattern, int value) {
  if (pattern.empty()) return;
  std::int32_t node = 0;
  for (const char ch : pattern) {
    const auto byte = static_cast<unsigned char>(ch);
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it != children.end() && it->first == byte) {
      node = it->second;
      continue;
    }
    const auto next = static_cast<std::int32_t>(nodes_.size());
    children.insert(it, {byte, next});
    nodes_.emplace_back();
    node = next;
  }
  nodes_[node].value = value;
  first_bytes_.set(static_cast<unsigned char>(pattern[0]));
}

bool LiteralMatcher::longest_at(std::string_view text, std::size_t pos, std::size_t* length,
                                int* value) const {
  std::int32_t node = 0;
  bool found = false;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes_[node].value >= 0) {
      found = true;
      *length = i + 1 - pos;
      *value = nodes_[node].value;
    }
  }
  return found;
}

Result<AddedVocabulary> AddedVocabulary::build(std::vector<AddedToken> tokens,
                                               const BpeModel& model,
                                               const Normalizer* normalizer) {
  AddedVocabulary v;
  VPOD_ASSIGN_OR_RETURN(v.word_char_, Regex::compile(kRustWordChar));
  // Ids as tokenizers assigns them (AddedVocabulary::add_tokens): a token
  // already added or in the model keeps that id; a new one gets the next id
  // after the model's vocab and the added tokens so far. The id written in
  // tokenizer.json is not used (tokenizers only warns when it differs).
  const auto model_size = static_cast<TokenId>(model.vocab().size());
  TokenId max_added = -1;
  for (AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    if (!utf8::is_valid(token.content)) return invalid_argument("added token is not valid UTF-8");
    if (token.special) v.special_contents_.insert(token.content);
    const auto existing = v.id_by_content_.find(token.content);
    if (existing != v.id_by_content_.end()) {
      // Listed twice: the later entry's options win.
      token.id = existing->second;
      v.tokens_[v.index_by_id_[existing->second]] = token;
      continue;
    }
    const TokenId model_id = model.vocab().find(token.content);
    if (model_id >= 0) {
      token.id = model_id;
    } else {
      token.id = max_added >= model_size ? max_added + 1 : model_size;
    }
    max_added = std::max(max_added, token.id);
    v.id_by_content_[token.content] = token.id;
    v.index_by_id_[token.id] = v.tokens_.size();
    v.tokens_.push_back(token);
  }
  for (const AddedToken& token : v.tokens_) {
    if (v.special_contents_.count(token.content) == 0) continue;
    if (static_cast<std::size_t>(token.id) >= v.special_ids_.size()) {
      v.special_ids_.resize(token.id + 1, false);
    }
    v.special_ids_[token.id] = true;
  }
  for (std::size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& token = v.tokens_[i];
    if (!token.normalized) {
      v.raw_matcher_.add(token.content, static_cast<int>(i));
      continue;
    }
    std::string pattern = token.content;
    if (normalizer != nullptr) VPOD_RETURN_IF_ERROR(normalizer->normalize(pattern));
    v.normalized_matcher_.add(pattern, static_cast<int>(i));
  }
  return v;
}

TokenId AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = id_by_content_.find(std::string(content));
  return it == id_by_content_.end() ? -1 : it->second;
}

const AddedToken* AddedVocabulary::find_by_id(TokenId id) const {
  const auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::split(std::string_view text, bool normalized_set,
                            std::vector<Segment>& out) const {
  const LiteralMatcher& matcher = normalized_set ? normalized_matcher_ : raw_matcher_;
  const auto size = static_cast<std::uint32_t>(text.size());
  if (text.empty() || matcher.empty()) {
    out.push_back(Segment{0, size, -1});
    return;
  }
  auto is_word_char_at = [&](std::size_t char_begin) {
    std::size_t char_end = char_begin;
    utf8::decode(text, char_end);
    std::size_t b = 0, e = 0;
    auto found = word_char_.search(text.substr(char_begin, char_end - char_begin), 0, &b, &e);
    return found.ok() && *found;
  };
  std::size_t start_offset = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t length = 0;
    int index = -1;
    if (!matcher.may_start_with(static_cast<unsigned char>(text[pos])) ||
        !matcher.longest_at(text, pos, &length, &index)) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    std::size_t start = pos;
    std::size_t stop = pos + length;
    pos = stop;  // the automaton resumes after the raw match, whatever the strips do
    if (token.single_word) {
      bool start_space = start == 0;
      if (!start_space) {
        std::size_t prev = start - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        start_space = !is_word_char_at(prev);
      }
      const bool stop_space = stop == text.size() || !is_word_char_at(stop);
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    }
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) {
      out.push_back(
          Segment{static_cast<std::uint32_t>(start_offset), static_cast<std::uint32_t>(start), -1});
    }
    out.push_back(
        Segment{static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(stop), token.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) {
    out.push_back(Segment{static_cast<std::uint32_t>(start_offset), size, -1});
  }
}

}  // namespace vpod::tokenizer
