// The JSON-lines protocol of `vpod tokenize`, shared with the server's
// /tokenize and /detokenize: a JSON string becomes a JSON array of ids; in
// decode mode a JSON array of ids becomes a JSON string.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace vpod::tokenizer {

struct TokenizeLineOptions {
  bool add_special_tokens = false;   // encode: apply the post-processor template (BOS, ...)
  bool decode = false;               // lines hold id arrays to decode
  bool skip_special_tokens = false;  // decode: drop special tokens
};

// Answers one line (one JSON value) with one line of JSON, without newline.
// Bad input gives invalid_argument with a message fit for the user.
Result<std::string> process_tokenize_line(const Tokenizer& tokenizer, std::string_view line,
                                          const TokenizeLineOptions& options);

// Parses a JSON array of token ids (non-negative integers).
Result<std::vector<TokenId>> parse_token_ids(std::string_view json);

}  // namespace vpod::tokenizer
