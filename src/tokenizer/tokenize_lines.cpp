// The `vpod tokenize` line protocol (tokenize_lines.h): one JSON line in, one
// JSON line out, in encode or decode mode.

#include "tokenizer/tokenize_lines.h"

#include <fmt/format.h>

#include <limits>
#include <nlohmann/json.hpp>

namespace vpod::tokenizer {
namespace {

Result<nlohmann::json> parse_json(std::string_view text) {
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return invalid_argument("the line is not valid JSON");
  return value;
}

Result<std::vector<TokenId>> ids_from_json(const nlohmann::json& value) {
  if (!value.is_array()) return invalid_argument("expected a JSON array of token ids");
  std::vector<TokenId> ids;
  ids.reserve(value.size());
  for (const nlohmann::json& item : value) {
    if (!item.is_number_integer()) {
      return invalid_argument(fmt::format("token ids must be integers, got {}", item.dump()));
    }
    const auto id = item.get<std::int64_t>();
    if (id < 0 || id > std::numeric_limits<TokenId>::max()) {
      return invalid_argument(fmt::format("token id {} is out of range", id));
    }
    ids.push_back(static_cast<TokenId>(id));
  }
  return ids;
}

}  // namespace

Result<std::vector<TokenId>> parse_token_ids(std::string_view json) {
  VPOD_ASSIGN_OR_RETURN(nlohmann::json value, parse_json(json));
  return ids_from_json(value);
}

Result<std::string> process_tokenize_line(const Tokenizer& tokenizer, std::string_view line,
                                          const TokenizeLineOptions& options) {
  VPOD_ASSIGN_OR_RETURN(nlohmann::json value, parse_json(line));
  if (options.decode) {
    VPOD_ASSIGN_OR_RETURN(std::vector<TokenId> ids, ids_from_json(value));
    VPOD_ASSIGN_OR_RETURN(std::string text, tokenizer.decode(ids, options.skip_special_tokens));
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (!value.is_string()) return invalid_argument("expected a JSON string to encode");
  VPOD_ASSIGN_OR_RETURN(
      std::vector<TokenId> ids,
      tokenizer.encode(value.get_ref<const std::string&>(), options.add_special_tokens));
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += ']';
  return out;
}

}  // namespace vpod::tokenizer
