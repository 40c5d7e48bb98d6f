// The tokenizer (tokenizer.h): encode through added tokens, normalizer,
// pre-tokenizer, BPE and post-processor, and decode through the decoder chain.

#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "common/utf8.h"

namespace vpod::tokenizer {

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text,
                                               bool add_special_tokens) const {
  std::vector<TokenId> ids;
  VPOD_RETURN_IF_ERROR(encode_into(text, add_special_tokens, ids));
  return ids;
}

Status Tokenizer::encode_into(std::string_view text, bool add_special_tokens,
                              std::vector<TokenId>& ids) const {
  if (!utf8::is_valid(text)) return invalid_argument("text to encode is not valid UTF-8");
  ids.clear();
  // 1. Added tokens matched in the raw input (normalized=false).
  std::vector<Segment> segments;
  added_.split(text, /*normalized_set=*/false, segments);
  for (const Segment& segment : segments) {
    if (segment.token >= 0) {
      ids.push_back(segment.token);
    } else if (segment.end > segment.begin) {
      VPOD_RETURN_IF_ERROR(encode_text(text.substr(segment.begin, segment.end - segment.begin),
                                       segment.begin == 0, ids));
    }
  }
  if (add_special_tokens && post_processor_) post_processor_->add_special_tokens(ids);
  return {};
}

// One stretch of input between raw-matched added tokens: normalize, match the
// normalized added tokens, then pre-tokenize and encode what is left.
Status Tokenizer::encode_text(std::string_view text, bool at_original_start,
                              std::vector<TokenId>& ids) const {
  std::string normalized(text);
  if (normalizer_) VPOD_RETURN_IF_ERROR(normalizer_->normalize(normalized));
  std::vector<Piece> pieces;
  if (!added_.has_normalized_tokens()) {
    if (normalized.empty()) return {};
    pieces.push_back(Piece{std::move(normalized), at_original_start});
    return encode_pieces(pieces, ids);
  }
  std::vector<Segment> segments;
  added_.split(normalized, /*normalized_set=*/true, segments);
  for (const Segment& segment : segments) {
    if (segment.token >= 0) {
      ids.push_back(segment.token);
    } else if (segment.end > segment.begin) {
      pieces.clear();
      pieces.push_back(Piece{normalized.substr(segment.begin, segment.end - segment.begin),
                             at_original_start && segment.begin == 0});
      VPOD_RETURN_IF_ERROR(encode_pieces(pieces, ids));
    }
  }
  return {};
}

Status Tokenizer::encode_pieces(std::vector<Piece>& pieces, std::vector<TokenId>& ids) const {
  if (pre_tokenizer_) VPOD_RETURN_IF_ERROR(pre_tokenizer_->pre_tokenize(pieces));
  for (const Piece& piece : pieces) VPOD_RETURN_IF_ERROR(model_->tokenize(piece.text, ids));
  return {};
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids,
                                      bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const TokenId id : ids) {
    if (skip_special_tokens && added_.is_special_id(id)) continue;
    const std::optional<std::string_view> token = id_to_token(id);
    if (!token) continue;
    tokens.emplace_back(*token);
  }
  std::string text;
  if (!decoder_) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
    return text;
  }
  VPOD_RETURN_IF_ERROR(decoder_->decode_chain(tokens));
  for (const std::string& t : tokens) text += t;
  return text;
}

std::optional<std::string_view> Tokenizer::id_to_token(TokenId id) const {
  if (const AddedToken* added = added_.find_by_id(id)) return std::string_view(added->content);
  return model_->vocab().token(id);
}

TokenId Tokenizer::token_to_id(std::string_view token) const {
  const TokenId added = added_.token_to_id(token);
  return added >= 0 ? added : model_->vocab().find(token);
}

bool Tokenizer::is_special(TokenId id) const { return added_.is_special_id(id); }

std::size_t Tokenizer::vocab_size() const {
  std::size_t limit = model_->vocab().id_limit();
  for (const AddedToken& t : added_.tokens()) {
    limit = std::max(limit, static_cast<std::size_t>(t.id) + 1);
  }
  return limit;
}

bool Tokenizer::decoder_groups_byte_tokens() const {
  return decoder_ && decoder_->groups_byte_tokens();
}

bool Tokenizer::is_byte_fallback_token(TokenId id) const {
  const std::optional<std::string_view> token = id_to_token(id);
  return token && byte_fallback_value(*token) >= 0;
}

}  // namespace vpod::tokenizer
