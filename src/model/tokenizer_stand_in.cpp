// Stand-in tokenizers (tokenizer_stand_in.h): extending a fixture tokenizer's
// vocabulary to the model's size with tokens that decode to text.

#include "model/tokenizer_stand_in.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>
#include <utility>
#include <vector>

namespace vpod::model {

namespace {

// std::map-backed: ordered_json looks keys up linearly, which makes parsing and
// extending a 64000-entry vocab quadratic (seconds). Key order in the output is
// then sorted; tokenizer.json readers key the vocab by name, so order carries nothing.
using json = nlohmann::json;

// A word piece: the word-start marker, then three or more ASCII lowercase letters.
bool is_word_piece(std::string_view token, std::string_view marker) {
  if (!token.starts_with(marker) || token.size() < marker.size() + 3) return false;
  return std::all_of(token.begin() + static_cast<std::ptrdiff_t>(marker.size()), token.end(),
                     [](char c) { return c >= 'a' && c <= 'z'; });
}

}  // namespace

Result<std::string> extend_tokenizer_vocab(std::string_view tokenizer_json,
                                           std::int64_t vocab_size) {
  json doc = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return invalid_argument("tokenizer.json: not a JSON object");
  }
  const auto model = doc.find("model");
  const bool bpe = model != doc.end() && model->is_object() && model->contains("type") &&
                   (*model)["type"].is_string() && (*model)["type"] == "BPE";
  if (!bpe) {
    return invalid_argument(
        "tokenizer.json: the model is not BPE; only a BPE vocab can be extended");
  }
  const auto vocab_it = model->find("vocab");
  if (vocab_it == model->end() || !vocab_it->is_object()) {
    return invalid_argument("tokenizer.json: model.vocab is missing or not an object");
  }
  json& vocab = *vocab_it;

  std::int64_t next_id = 0;
  std::unordered_set<std::string> taken;
  taken.reserve(vocab.size() * 2);
  std::vector<std::pair<std::int64_t, std::string>> pieces_by_id;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) {
      return invalid_argument(
          fmt::format("tokenizer.json: the id of '{}' is not an integer", token));
    }
    next_id = std::max(next_id, id.get<std::int64_t>() + 1);
    taken.insert(token);
    pieces_by_id.emplace_back(id.get<std::int64_t>(), token);
  }
  if (const auto added = doc.find("added_tokens"); added != doc.end() && added->is_array()) {
    for (const auto& t : *added) {
      if (t.contains("id") && t["id"].is_number_integer()) {
        next_id = std::max(next_id, t["id"].get<std::int64_t>() + 1);
      }
      if (t.contains("content") && t["content"].is_string()) taken.insert(t["content"]);
    }
  }
  if (next_id >= vocab_size) return std::string(tokenizer_json);

  // Word pieces in id order (BPE ids follow merge order, so frequent words come first),
  // with whichever word-start marker the vocab uses: SentencePiece's or GPT-2's.
  std::sort(pieces_by_id.begin(), pieces_by_id.end());
  std::vector<std::string> words;
  std::size_t marker_size = 0;
  for (std::string_view marker : {std::string_view("\u2581"), std::string_view("\u0120")}) {
    std::vector<std::string> found;
    for (const auto& [id, token] : pieces_by_id) {
      if (is_word_piece(token, marker)) found.push_back(token);
    }
    if (found.size() > words.size()) {
      words = std::move(found);
      marker_size = marker.size();
    }
  }
  const std::int64_t needed = vocab_size - next_id;
  const auto w = static_cast<std::int64_t>(words.size());
  if (w * w < needed) {
    return invalid_argument(
        fmt::format("tokenizer.json: {} word pieces cannot make the {} pieces that ids {}..{} need",
                    w, needed, next_id, vocab_size - 1));
  }
  for (std::int64_t k = 0; next_id < vocab_size; ++k) {
    if (k >= w * w) {
      return invalid_argument(
          fmt::format("tokenizer.json: too many joined word pieces already exist to reach id {}",
                      vocab_size - 1));
    }
    std::string piece = words[static_cast<std::size_t>(k / w)] +
                        words[static_cast<std::size_t>(k % w)].substr(marker_size);
    if (!taken.insert(piece).second) continue;
    vocab[piece] = next_id++;
  }
  return doc.dump(2, ' ', /*ensure_ascii=*/false) + "\n";
}

}  // namespace vpod::model
