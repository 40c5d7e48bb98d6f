// Decoders turn token strings back into text, as Hugging Face tokenizers'
// decode_chain does: each step maps the list of token strings to a new list,
// and the final list is concatenated. Supported: ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace vpod::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status decode_chain(std::vector<std::string>& tokens) const = 0;
  // Whether this decoder (or a step of it) groups "<0xAB>" byte tokens: the
  // incremental detokenizer must then wait for the end of such a run.
  virtual bool groups_byte_tokens() const { return false; }
};

// Maps GPT-2's byte alphabet back to bytes and decodes them as UTF-8, with
// U+FFFD for invalid sequences (Rust's from_utf8_lossy).
class ByteLevelDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override;
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(ReplaceNormalizer replace) : replace_(std::move(replace)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override;

 private:
  ReplaceNormalizer replace_;
};

// Runs of "<0xAB>" tokens become the UTF-8 text of their bytes, or one U+FFFD
// per byte when the run is not valid UTF-8.
class ByteFallbackDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override;
  bool groups_byte_tokens() const override { return true; }
};

class FuseDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>& tokens) const override;
};

// Removes up to `start` leading and `stop` trailing `content` characters from
// each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Status decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t content_;
  std::size_t start_;
  std::size_t stop_;
};

// The replacement character becomes a space, except in the first token when
// a prefix space was prepended (tokenizers then drops all of them there).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, PrependScheme scheme)
      : replacement_(replacement), scheme_(scheme) {}
  Status decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t replacement_;
  PrependScheme scheme_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  Status decode_chain(std::vector<std::string>& tokens) const override;
  bool groups_byte_tokens() const override;

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// The byte a "<0xAB>" token stands for, or -1 (tokenizers' ByteFallback test:
// six bytes, "<0x" prefix, ">" suffix, two hex digits).
int byte_fallback_value(std::string_view token);

}  // namespace vpod::tokenizer
