// Exact agreement with Hugging Face tokenizers (golden ids and decodes made by
// tools/tokenizer/make_golden.py) for the three fixture tokenizers, the two
// tokenizers the tests train, and one variant per supported component; plus
// the incremental detokenizer's invariants on the same ids.
#include <gtest/gtest.h>

#include <span>

#include "common/utf8.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_test_data.h"

namespace vpod::tokenizer {
namespace {

using testing::fixture_tokenizers_dir;
using testing::read_file;
using testing::read_jsonl;
using testing::test_data_dir;

struct Case {
  std::string name;    // golden/<name>.jsonl
  std::string source;  // "fixture", "trained" or "feature"
};

// gtest prints parameters in test listings; a Case prints as its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> all_cases() {
  std::vector<Case> cases = {{"llama3", "fixture"},
                             {"qwen3", "fixture"},
                             {"mistral", "fixture"},
                             {"bytelevel", "trained"},
                             {"sentencepiece", "trained"}};
  const nlohmann::json features =
      nlohmann::json::parse(read_file(test_data_dir() / "features.json"));
  for (const auto& f : features) {
    cases.push_back({"feature_" + f["name"].get<std::string>(), "feature"});
  }
  return cases;
}

// base + override, as tools/tokenizer/tokcases.py apply_override does.
std::string feature_json(const std::string& name) {
  const nlohmann::json features =
      nlohmann::json::parse(read_file(test_data_dir() / "features.json"));
  for (const auto& f : features) {
    if ("feature_" + f["name"].get<std::string>() != name) continue;
    nlohmann::json data = nlohmann::json::parse(
        read_file(test_data_dir() / "trained" / (f["base"].get<std::string>() + ".json")));
    for (const auto& [key, value] : f["override"].items()) {
      if (key == "model") {
        for (const auto& [k, v] : value.items()) data["model"][k] = v;
      } else if (key == "extra_added_tokens") {
        std::int64_t next_id = 0;
        for (const auto& [token, id] : data["model"]["vocab"].items()) {
          next_id = std::max(next_id, id.get<std::int64_t>() + 1);
        }
        for (const auto& t : data["added_tokens"]) {
          next_id = std::max(next_id, t["id"].get<std::int64_t>() + 1);
        }
        for (nlohmann::json t : value) {
          t["id"] = next_id++;
          data["added_tokens"].push_back(t);
        }
      } else {
        data[key] = value;
      }
    }
    return data.dump();
  }
  ADD_FAILURE() << "no feature " << name;
  return "";
}

class GoldenTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    Result<Tokenizer> loaded = invalid_argument("not loaded");
    if (c.source == "fixture") {
      const auto dir = fixture_tokenizers_dir() / c.name;
      if (!std::filesystem::exists(dir / "tokenizer.json")) {
        GTEST_SKIP() << "fixture tokenizer not found at " << dir
                     << " (CI clones the shared fixtures beside the repository)";
      }
      loaded = Tokenizer::from_file(dir);
    } else if (c.source == "trained") {
      loaded = Tokenizer::from_file(test_data_dir() / "trained" / (c.name + ".json"));
    } else {
      loaded = Tokenizer::from_json(feature_json(c.name));
    }
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    tokenizer_.emplace(std::move(loaded).value());
    corpus_ = read_jsonl(test_data_dir() / "corpus.jsonl");
    rows_ = read_jsonl(test_data_dir() / "golden" / (c.name + ".jsonl"));
    ASSERT_FALSE(rows_.empty());
  }

  std::optional<Tokenizer> tokenizer_;
  std::vector<nlohmann::json> corpus_;
  std::vector<nlohmann::json> rows_;
};

std::string printable(const std::string& s) { return nlohmann::json(s).dump(); }

TEST_P(GoldenTest, EncodeMatchesTokenizers) {
  int checked = 0;
  for (const auto& row : rows_) {
    if (!row.contains("line")) continue;
    const std::string text = corpus_.at(row["line"].get<std::size_t>()).get<std::string>();
    const auto ids = row["ids"].get<std::vector<TokenId>>();
    const auto special = row.contains("special") ? row["special"].get<std::vector<TokenId>>() : ids;
    auto plain = tokenizer_->encode(text, false);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    EXPECT_EQ(*plain, ids) << "line " << row["line"] << ": " << printable(text);
    auto with_special = tokenizer_->encode(text, true);
    ASSERT_TRUE(with_special.ok());
    EXPECT_EQ(*with_special, special) << "line " << row["line"] << " (add_special_tokens)";
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

TEST_P(GoldenTest, DecodeMatchesTokenizers) {
  for (const auto& row : rows_) {
    std::vector<TokenId> ids;
    std::string expected;
    if (row.contains("line")) {
      const std::string text = corpus_.at(row["line"].get<std::size_t>()).get<std::string>();
      ids = row.contains("special") ? row["special"].get<std::vector<TokenId>>()
                                    : row["ids"].get<std::vector<TokenId>>();
      if (row.contains("decoded") && row["decoded"].is_null()) continue;  // tokenizers panicked
      expected = row.contains("decoded") ? row["decoded"].get<std::string>() : text;
    } else {
      ids = row["decode_ids"].get<std::vector<TokenId>>();
      if (row["decoded"].is_null()) continue;
      expected = row["decoded"].get<std::string>();
    }
    auto decoded = tokenizer_->decode(ids, false);
    ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
    EXPECT_EQ(*decoded, expected) << "ids " << nlohmann::json(ids).dump();
    if (row.contains("decoded_skip") && row["decoded_skip"].is_null()) continue;
    const std::string expected_skip =
        row.contains("decoded_skip") ? row["decoded_skip"].get<std::string>() : expected;
    auto skipped = tokenizer_->decode(ids, true);
    ASSERT_TRUE(skipped.ok());
    EXPECT_EQ(*skipped, expected_skip) << "ids " << nlohmann::json(ids).dump() << " (skip)";
  }
}

// Feeds `ids` one at a time; checks each delta is valid UTF-8 and returns
// the concatenation.
std::string stream(const Tokenizer& tok, std::span<const TokenId> ids, bool skip,
                   std::span<const TokenId> context = {}) {
  IncrementalDetokenizer detok(tok, skip, context);
  std::string text;
  for (const TokenId id : ids) {
    auto delta = detok.feed(id);
    EXPECT_TRUE(delta.ok()) << delta.status().to_string();
    if (!delta.ok()) return text;
    EXPECT_TRUE(utf8::is_valid(*delta)) << "invalid UTF-8 delta " << printable(*delta);
    text += *delta;
  }
  auto rest = detok.finish();
  EXPECT_TRUE(rest.ok()) << rest.status().to_string();
  if (rest.ok()) text += *rest;
  return text;
}

TEST_P(GoldenTest, StreamedDeltasAddUpToTheDecode) {
  for (const auto& row : rows_) {
    const auto ids = row.contains("line")
                         ? (row.contains("special") ? row["special"].get<std::vector<TokenId>>()
                                                    : row["ids"].get<std::vector<TokenId>>())
                         : row["decode_ids"].get<std::vector<TokenId>>();
    for (const bool skip : {false, true}) {
      const std::string full = tokenizer_->decode(ids, skip).value();
      EXPECT_EQ(stream(*tokenizer_, ids, skip), full)
          << "ids " << nlohmann::json(ids).dump() << " skip=" << skip;
      // With the first half as context, the deltas are what the second half
      // adds to the text (when decoding is prefix-stable there).
      const std::size_t half = ids.size() / 2;
      const std::span<const TokenId> all(ids);
      const std::string head = tokenizer_->decode(all.first(half), skip).value();
      if (full.compare(0, head.size(), head) == 0 && !head.empty()) {
        EXPECT_EQ(stream(*tokenizer_, all.subspan(half), skip, all.first(half)),
                  full.substr(head.size()))
            << "ids " << nlohmann::json(ids).dump() << " with context, skip=" << skip;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace vpod::tokenizer
