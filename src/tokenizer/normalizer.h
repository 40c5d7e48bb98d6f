// Normalizers: the first stage of encoding, applied to each stretch of text
// between added tokens. Supported as in Hugging Face tokenizers: NFC (and its
// siblings NFD, NFKC, NFKD, all via utf8proc), Prepend, Replace, Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/regex.h"

namespace vpod::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place.
  virtual Status normalize(std::string& text) const = 0;
};

enum class UnicodeForm { nfc, nfd, nfkc, nfkd };

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  Status normalize(std::string& text) const override;

 private:
  UnicodeForm form_;
};

// Prepends a string to non-empty text.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  Status normalize(std::string& text) const override;

 private:
  std::string prepend_;
};

// Replaces every match of a pattern (a literal string or a regex) by `content`.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status normalize(std::string& text) const override;
  // The same replacement over one string, as the Replace decoder uses it.
  Result<std::string> replace(std::string_view text) const;

 private:
  Regex pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status normalize(std::string& text) const override;

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace vpod::tokenizer
