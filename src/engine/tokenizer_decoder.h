// DecoderFactory over the tokenizer's streaming detokenizer
// (tokenizer::IncrementalDetokenizer): the text the engine matches stop
// strings against and streams to clients.
#pragma once

#include <memory>
#include <span>

#include "engine/text_decoder.h"
#include "tokenizer/tokenizer.h"

namespace vpod::engine {

class TokenizerDecoderFactory final : public DecoderFactory {
 public:
  // The tokenizer must outlive the factory and every decoder it creates.
  explicit TokenizerDecoderFactory(const tokenizer::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  std::unique_ptr<IncrementalDecoder> create(std::span<const std::int32_t> prompt,
                                             bool skip_special_tokens) const override;

 private:
  const tokenizer::Tokenizer& tokenizer_;
};

}  // namespace vpod::engine
