// A Hugging Face tokenizer.json, loaded and run in C++ with the reference's
// exact behaviour: encode (added tokens, normalizer, pre-tokenizer, BPE,
// post-processor) and decode (decoder chain). Thread-safe for concurrent
// encode/decode calls once loaded. The server's /tokenize and /detokenize and
// `vpod tokenize` call encode() and decode() below.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace vpod::tokenizer {

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, or a directory holding one.
  static Result<Tokenizer> from_file(const std::filesystem::path& path);
  // Parses the contents of a tokenizer.json. Unsupported components are
  // rejected with a Status naming them and where they are in the file.
  static Result<Tokenizer> from_json(std::string_view json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (valid UTF-8, else invalid_argument). Added tokens in
  // the text are recognised; add_special_tokens applies the post-processor
  // template (e.g. BOS), as tokenizers' encode(text, add_special_tokens).
  Result<std::vector<TokenId>> encode(std::string_view text, bool add_special_tokens) const;
  Status encode_into(std::string_view text, bool add_special_tokens,
                     std::vector<TokenId>& ids) const;

  // Text of `ids`, as tokenizers' decode(ids, skip_special_tokens): unknown ids
  // are skipped, invalid UTF-8 becomes U+FFFD.
  Result<std::string> decode(std::span<const TokenId> ids, bool skip_special_tokens) const;

  // The token string of `id` (added tokens first, then the model), if any.
  std::optional<std::string_view> id_to_token(TokenId id) const;
  // The id of a token string (added tokens first, then the model), or -1.
  TokenId token_to_id(std::string_view token) const;
  // Whether decode(..., skip_special_tokens=true) drops `id`.
  bool is_special(TokenId id) const;
  // One past the largest id of the model and the added tokens.
  std::size_t vocab_size() const;
  // Whether decoding groups runs of "<0xAB>" byte tokens, and whether `id` is
  // such a token: a stream must not emit text in the middle of such a run.
  bool decoder_groups_byte_tokens() const;
  bool is_byte_fallback_token(TokenId id) const;

  const BpeModel& model() const { return *model_; }
  const AddedVocabulary& added_vocabulary() const { return added_; }

 private:
  Tokenizer() = default;
  friend class TokenizerLoader;

  Status encode_text(std::string_view text, bool at_original_start,
                     std::vector<TokenId>& ids) const;
  Status encode_pieces(std::vector<Piece>& pieces, std::vector<TokenId>& ids) const;

  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
};

}  // namespace vpod::tokenizer
