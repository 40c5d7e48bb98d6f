// Streaming detokenization (incremental_detokenizer.h): the decode window and
// the rules for when text is final.

#include "tokenizer/incremental_detokenizer.h"

#include "common/utf8.h"

namespace vpod::tokenizer {
namespace {

// Visible tokens kept before the new ones when decoding the window.
constexpr std::size_t kContextTokens = 4;

bool ends_with_replacement(std::string_view text) {
  return text.size() >= utf8::kReplacementChar.size() &&
         text.substr(text.size() - utf8::kReplacementChar.size()) == utf8::kReplacementChar;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const TokenId> context)
    : tokenizer_(&tokenizer),
      skip_special_tokens_(skip_special_tokens),
      num_context_(context.size()),
      ids_(context.begin(), context.end()) {
  read_offset_ = ids_.size();
  prefix_offset_ = window_start(read_offset_);
  auto text = tokenizer_->decode(std::span(ids_).subspan(prefix_offset_), skip_special_tokens_);
  if (text.ok()) prefix_text_ = std::move(text).value();
}

bool IncrementalDetokenizer::visible(TokenId id) const {
  return tokenizer_->id_to_token(id) && !(skip_special_tokens_ && tokenizer_->is_special(id));
}

// Where the window ending at `end` starts: kContextTokens visible tokens back,
// and never inside a run of byte tokens (its text depends on the whole run).
std::size_t IncrementalDetokenizer::window_start(std::size_t end) const {
  std::size_t start = end;
  std::size_t seen = 0;
  while (start > 0 && seen < kContextTokens) {
    --start;
    if (visible(ids_[start])) ++seen;
  }
  if (tokenizer_->decoder_groups_byte_tokens() && start < end &&
      tokenizer_->is_byte_fallback_token(ids_[start])) {
    // Invisible tokens do not end a run: decode drops them before grouping.
    std::size_t run_start = start;
    for (std::size_t i = start; i > 0; --i) {
      const TokenId previous = ids_[i - 1];
      if (!visible(previous)) continue;
      if (!tokenizer_->is_byte_fallback_token(previous)) break;
      run_start = i - 1;
    }
    start = run_start;
  }
  return start;
}

// The text of the window after what was emitted. Normally the window's text
// extends prefix_text_; it can only change retroactively when the context
// ended inside a byte-token run that the new tokens make invalid UTF-8. Then
// the text from the first difference on is emitted, so no generated text is
// lost.
std::string IncrementalDetokenizer::new_text(const std::string& full) const {
  if (full.compare(0, prefix_text_.size(), prefix_text_) == 0) {
    return full.substr(prefix_text_.size());
  }
  std::size_t common = 0;
  while (common < full.size() && common < prefix_text_.size() &&
         full[common] == prefix_text_[common]) {
    ++common;
  }
  while (common > 0 && (static_cast<unsigned char>(full[common]) & 0xC0) == 0x80) --common;
  return full.substr(common);
}

Result<std::string> IncrementalDetokenizer::feed(TokenId id) {
  ids_.push_back(id);
  if (!visible(id)) return std::string();
  if (tokenizer_->decoder_groups_byte_tokens() && tokenizer_->is_byte_fallback_token(id)) {
    return std::string();
  }
  return emit(/*hold_incomplete=*/true);
}

Result<std::string> IncrementalDetokenizer::finish() {
  if (read_offset_ == ids_.size()) return std::string();
  return emit(/*hold_incomplete=*/false);
}

Result<std::string> IncrementalDetokenizer::emit(bool hold_incomplete) {
  VPOD_ASSIGN_OR_RETURN(
      std::string full,
      tokenizer_->decode(std::span(ids_).subspan(prefix_offset_), skip_special_tokens_));
  if (hold_incomplete && (full.size() <= prefix_text_.size() || ends_with_replacement(full))) {
    return std::string();
  }
  std::string delta = new_text(full);
  read_offset_ = ids_.size();
  prefix_offset_ = window_start(read_offset_);
  VPOD_ASSIGN_OR_RETURN(prefix_text_, tokenizer_->decode(std::span(ids_).subspan(prefix_offset_),
                                                         skip_special_tokens_));
  return delta;
}

}  // namespace vpod::tokenizer
