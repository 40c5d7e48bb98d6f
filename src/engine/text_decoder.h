// The engine's view of incremental detokenization: token ids in, text out
// only once it is final (never half a UTF-8 character, leading spaces right at
// chunk boundaries). The tokenizer (src/tokenizer) implements it; stop strings
// are matched on the text it produces.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace vpod::engine {

class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;
  // Feeds one generated token; appends the text that became final to `out`.
  virtual void append(std::int32_t token, std::string& out) = 0;
  // No more tokens: appends whatever is still pending (an incomplete UTF-8
  // sequence is emitted as U+FFFD, as Hugging Face does).
  virtual void finish(std::string& out) = 0;
};

class DecoderFactory {
 public:
  virtual ~DecoderFactory() = default;
  // A decoder for one request's output. `prompt` gives the context some
  // tokenizers need to decode the first output token (SentencePiece spaces).
  virtual std::unique_ptr<IncrementalDecoder> create(std::span<const std::int32_t> prompt,
                                                     bool skip_special_tokens) const = 0;
};

}  // namespace vpod::engine
