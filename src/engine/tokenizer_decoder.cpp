// TokenizerDecoderFactory (tokenizer_decoder.h): the engine's text decoders
// over the tokenizer's incremental detokenizer.
#include "engine/tokenizer_decoder.h"

#include <algorithm>
#include <string>

#include "common/log.h"
#include "tokenizer/incremental_detokenizer.h"

namespace vpod::engine {

namespace {

// Prompt tokens given to the detokenizer as context: enough for decoder rules
// that look back (SentencePiece spaces, byte runs), few enough to be cheap.
constexpr std::size_t kPromptContextTokens = 8;

class TokenizerDecoder final : public IncrementalDecoder {
 public:
  TokenizerDecoder(const tokenizer::Tokenizer& tok, bool skip_special_tokens,
                   std::span<const std::int32_t> context)
      : detokenizer_(tok, skip_special_tokens, context) {}

  void append(std::int32_t token, std::string& out) override {
    Result<std::string> text = detokenizer_.feed(token);
    if (!text.ok()) {
      // Only an id outside the vocabulary fails, and the model samples from
      // its vocabulary: log it rather than end a stream over it.
      VPOD_LOG_WARN("detokenizer: {}", text.status().to_string());
      return;
    }
    out += *text;
  }

  void finish(std::string& out) override {
    Result<std::string> text = detokenizer_.finish();
    if (text.ok()) out += *text;
  }

 private:
  tokenizer::IncrementalDetokenizer detokenizer_;
};

}  // namespace

std::unique_ptr<IncrementalDecoder> TokenizerDecoderFactory::create(
    std::span<const std::int32_t> prompt, bool skip_special_tokens) const {
  const std::size_t n = std::min(prompt.size(), kPromptContextTokens);
  return std::make_unique<TokenizerDecoder>(tokenizer_, skip_special_tokens,
                                            prompt.subspan(prompt.size() - n));
}

}  // namespace vpod::engine
