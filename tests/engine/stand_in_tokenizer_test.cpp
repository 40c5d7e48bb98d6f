// The stand-in tokenizer of the Yi presets (model/tokenizer_stand_in.h) through
// the real tokenizer: every id the model can emit decodes to text, as with
// Yi's own 64000-token tokenizer, and text still encodes to the ids the
// fixture gives. (Here, not in tests/model: it needs both the model folder's
// writer and the tokenizer, which only the engine's library links.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/make_model.h"
#include "model/model_config.h"
#include "model/tokenizer_stand_in.h"
#include "tokenizer/tokenizer.h"

namespace vpod {
namespace {

TEST(StandInTokenizer, EveryModelIdOfTheYiPresetsDecodesToText) {
  const auto fixtures = model::find_fixtures_dir();
  if (fixtures.empty()) GTEST_SKIP() << "no tokenizer fixtures (set VPOD_FIXTURES)";
  int checked_presets = 0;
  for (const model::ModelPreset& p : model::model_presets()) {
    if (!p.extend_tokenizer_to_vocab) continue;
    SCOPED_TRACE(p.name);
    const auto path = fixtures / "tokenizers" / p.tokenizer_fixture / "tokenizer.json";
    auto text = model::read_text_file(path);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    auto fixture = tokenizer::Tokenizer::from_json(*text);
    ASSERT_TRUE(fixture.ok()) << fixture.status().to_string();
    auto extended_json = model::extend_tokenizer_vocab(*text, p.config.vocab_size);
    ASSERT_TRUE(extended_json.ok()) << extended_json.status().to_string();
    auto extended = tokenizer::Tokenizer::from_json(*extended_json);
    ASSERT_TRUE(extended.ok()) << extended.status().to_string();

    const auto old_size = static_cast<tokenizer::TokenId>(fixture->vocab_size());
    ASSERT_LT(old_size, p.config.vocab_size);
    EXPECT_EQ(extended->vocab_size(), static_cast<std::size_t>(p.config.vocab_size));

    // Before: an id past the fixture has no text. After: every new id has some.
    const tokenizer::TokenId last = p.config.vocab_size - 1;
    auto none = fixture->decode(std::vector<tokenizer::TokenId>{last}, true);
    ASSERT_TRUE(none.ok()) << none.status().to_string();
    EXPECT_EQ(*none, "");
    int empty = 0;
    for (tokenizer::TokenId id = old_size; id < p.config.vocab_size; ++id) {
      auto piece = extended->decode(std::vector<tokenizer::TokenId>{id}, true);
      ASSERT_TRUE(piece.ok()) << id << ": " << piece.status().to_string();
      if (piece->empty()) ++empty;
    }
    EXPECT_EQ(empty, 0);

    // Encoding does not change, and decoding the fixture's ids does not either.
    const std::string sample =
        "Summarize the following article: the results of the survey, 2023 (n=1,024), show "
        "that naïve models over-fit — see Table 3.";
    auto a = fixture->encode(sample, true);
    auto b = extended->encode(sample, true);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, *b);
    auto back = extended->decode(*b, true);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, sample);
    ++checked_presets;
  }
  EXPECT_EQ(checked_presets, 2);  // yi-6b, yi-6b-200k
}

}  // namespace
}  // namespace vpod
