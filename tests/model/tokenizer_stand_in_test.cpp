// extend_tokenizer_vocab: the stand-in tokenizer make-model writes when a
// preset's real tokenizer is larger than its fixture (Yi-6B: 64000 ids, the
// 32000-id Mistral fixture). Checked on the JSON; decoding through the real
// tokenizer is checked in tests/engine/stand_in_tokenizer_test.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "model/make_model.h"
#include "model/tokenizer_stand_in.h"

namespace vpod::model {
namespace {

using json = nlohmann::ordered_json;

// A small SentencePiece-style BPE tokenizer.json: word pieces start with U+2581.
std::string small_tokenizer(const std::string& marker = "\u2581", int added_id = 6) {
  json t;
  t["version"] = "1.0";
  t["added_tokens"] = json::array({{{"id", added_id}, {"content", "<s>"}, {"special", true}}});
  t["model"]["type"] = "BPE";
  t["model"]["vocab"] = {{"<unk>", 0},           {marker + "the", 1}, {marker + "and", 2},
                         {marker + "thecat", 3}, {marker + "cat", 4}, {"x", 5}};
  t["model"]["merges"] = json::array({"x x"});
  return t.dump(2);
}

TEST(TokenizerStandIn, AppendsJoinedWordPiecesUpToVocabSize) {
  const std::string original = small_tokenizer();
  auto out = extend_tokenizer_vocab(original, 14);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  // Compared as JSON values: the output keys objects by name, so their order may change.
  const nlohmann::json before = nlohmann::json::parse(original);
  const nlohmann::json after = nlohmann::json::parse(*out);

  // The old entries, merges and added tokens are untouched.
  for (const auto& [token, id] : before["model"]["vocab"].items()) {
    EXPECT_EQ(after["model"]["vocab"][token], id) << token;
  }
  EXPECT_EQ(after["model"]["merges"], before["model"]["merges"]);
  EXPECT_EQ(after["added_tokens"], before["added_tokens"]);

  // New ids start after the largest of vocab (5) and added tokens (6), and are
  // contiguous up to vocab_size - 1. Word pieces in id order: the, and, thecat, cat;
  // "▁thecat" exists already, so (the, cat) is skipped.
  std::vector<std::pair<int, std::string>> added;
  std::set<std::string> unique;
  for (const auto& [token, id] : after["model"]["vocab"].items()) {
    EXPECT_TRUE(unique.insert(token).second) << token;
    if (id.get<int>() > 5) added.emplace_back(id.get<int>(), token);
  }
  std::sort(added.begin(), added.end());  // the output keys the vocab by name
  const std::vector<std::pair<int, std::string>> expected = {
      {7, "\u2581thethe"},  {8, "\u2581theand"},     {9, "\u2581thethecat"}, {10, "\u2581andthe"},
      {11, "\u2581andand"}, {12, "\u2581andthecat"}, {13, "\u2581andcat"}};
  EXPECT_EQ(added, expected);
}

TEST(TokenizerStandIn, GptStyleMarker) {
  auto out = extend_tokenizer_vocab(small_tokenizer("\u0120"), 9);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const json after = json::parse(*out);
  EXPECT_EQ(after["model"]["vocab"]["\u0120thethe"], 7);
  EXPECT_EQ(after["model"]["vocab"]["\u0120theand"], 8);
  EXPECT_EQ(after["model"]["vocab"].size(), 8u);
}

TEST(TokenizerStandIn, CoveredVocabIsReturnedUnchanged) {
  const std::string original = small_tokenizer();
  for (std::int64_t size : {1, 7}) {
    auto out = extend_tokenizer_vocab(original, size);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, original) << size;
  }
}

TEST(TokenizerStandIn, RejectsWhatItCannotExtend) {
  json unigram = json::parse(small_tokenizer());
  unigram["model"]["type"] = "Unigram";
  auto r = extend_tokenizer_vocab(unigram.dump(), 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not BPE"), std::string::npos) << r.status().to_string();

  json numeric_type = json::parse(small_tokenizer());
  numeric_type["model"]["type"] = 5;  // not a string: an error, not an exception
  EXPECT_FALSE(extend_tokenizer_vocab(numeric_type.dump(), 20).ok());
  json string_id = json::parse(small_tokenizer());
  string_id["model"]["vocab"]["x"] = "5";
  EXPECT_FALSE(extend_tokenizer_vocab(string_id.dump(), 20).ok());
  EXPECT_FALSE(extend_tokenizer_vocab("{not json", 20).ok());
  EXPECT_FALSE(extend_tokenizer_vocab("[]", 20).ok());
  json no_vocab = json::parse(small_tokenizer());
  no_vocab["model"].erase("vocab");
  EXPECT_FALSE(extend_tokenizer_vocab(no_vocab.dump(), 20).ok());

  // Four word pieces join into at most 16 pieces, one of which exists already.
  r = extend_tokenizer_vocab(small_tokenizer(), 7 + 16);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("id 22"), std::string::npos) << r.status().to_string();
  r = extend_tokenizer_vocab(small_tokenizer(), 7 + 17);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("4 word pieces"), std::string::npos)
      << r.status().to_string();
}

TEST(TokenizerStandIn, OnlyPresetsWhoseRealTokenizerIsLargerExtendIt) {
  for (const ModelPreset& p : model_presets()) {
    const bool yi = p.name == "yi-6b" || p.name == "yi-6b-200k";
    EXPECT_EQ(p.extend_tokenizer_to_vocab, yi) << p.name;
  }
}

}  // namespace
}  // namespace vpod::model
