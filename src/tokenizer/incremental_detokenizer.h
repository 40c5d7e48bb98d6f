// Streaming detokenization: feed generated token ids one at a time, get back
// only text that is final. Built on Tokenizer::decode over a short window of
// recent tokens (the approach of tokenizers' DecodeStream and vLLM), with the
// rules that make the concatenated deltas equal the full decode:
//   - text ending in U+FFFD is held back (an unfinished UTF-8 sequence);
//   - while the last visible token is a "<0xAB>" byte token and the decoder
//     groups such runs (ByteFallback), nothing is emitted: the whole run's
//     text is only known at its end;
//   - the window starts a few visible tokens back, so decoder rules that look
//     at the first token (Metaspace, Strip after Fuse) apply to context, and a
//     SentencePiece "▁word" token at a chunk boundary still yields " word".
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace vpod::tokenizer {

class IncrementalDetokenizer {
 public:
  // `context`: ids already decoded before the stream (e.g. the prompt's last
  // tokens) whose text is not emitted but conditions the first deltas; with
  // an empty context the deltas add up to decode(generated ids).
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                         std::span<const TokenId> context = {});

  // Appends `id` and returns the newly final text (often empty).
  Result<std::string> feed(TokenId id);
  // Returns whatever text is still held back (e.g. an unfinished UTF-8
  // sequence, now final as U+FFFD). Call once at the end of the stream.
  Result<std::string> finish();

  // Number of generated ids fed so far.
  std::size_t num_generated() const { return ids_.size() - num_context_; }

 private:
  bool visible(TokenId id) const;
  std::size_t window_start(std::size_t end) const;
  std::string new_text(const std::string& full) const;
  // Decodes the window, returns the text past the last emitted offset and
  // moves the window on. `hold_incomplete` (feed): return nothing while the
  // window's text has not grown or ends in an incomplete character.
  Result<std::string> emit(bool hold_incomplete);

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::size_t num_context_;
  std::vector<TokenId> ids_;
  std::size_t prefix_offset_ = 0;  // window start
  std::size_t read_offset_ = 0;    // end of the text already emitted
  std::string prefix_text_;        // decode(ids_[prefix_offset_, read_offset_))
};

}  // namespace vpod::tokenizer
