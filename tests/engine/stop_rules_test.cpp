// Stop rules and the streamed text: stop strings held back while they might
// still match (also across token boundaries and inside UTF-8 characters),
// cut exactly, EOS / stop ids / min_tokens / ignore_eos / max_tokens /
// max_model_len, and include_stop_str_in_output.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/stop_strings.h"
#include "engine_doubles.h"

namespace vpod::engine {
namespace {

using testing::ByteDecoderFactory;
using testing::FakeKvCache;
using testing::ScriptedModel;

// --- StopStringMatcher ------------------------------------------------------

std::size_t brute_holdback(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t best = 0;
  for (const std::string& s : stops)
    for (std::size_t len = 1; len < s.size() && len <= text.size(); ++len)
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len))
        best = std::max(best, len);
  return best;
}

TEST(StopStringMatcher, HoldsBackTheLongestSuffixThatStartsAStop) {
  StopStringMatcher m({"</s>", "STOP"});
  EXPECT_EQ(m.holdback("hello"), 0u);
  EXPECT_EQ(m.holdback("hello<"), 1u);
  EXPECT_EQ(m.holdback("hello</"), 2u);
  EXPECT_EQ(m.holdback("hello</s"), 3u);
  EXPECT_EQ(m.holdback("hello</s>"), 0u);  // a whole stop is found, not held
  EXPECT_EQ(m.holdback("ST"), 2u);
  EXPECT_EQ(m.holdback(""), 0u);
  StopStringMatcher periodic({"abab"});
  EXPECT_EQ(periodic.holdback("xabababa"), 3u);  // "aba"
  EXPECT_EQ(periodic.holdback("ababab"), 2u);    // "ab": "abab" is a full match, not a prefix
}

TEST(StopStringMatcher, HoldbackMatchesABruteForceOracle) {
  std::mt19937 rng(5);
  auto random_string = [&](int max_len) {
    std::string s(std::uniform_int_distribution<int>(1, max_len)(rng), 'a');
    for (char& c : s) c = static_cast<char>('a' + rng() % 3);
    return s;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    for (int k = 1 + rng() % 3; k > 0; --k) stops.push_back(random_string(6));
    const std::string text = random_string(12);
    StopStringMatcher m(stops);
    ASSERT_EQ(m.holdback(text), brute_holdback(text, stops)) << text;
  }
}

TEST(StopStringMatcher, FindsTheEarliestStopPreferringTheLongerOnATie) {
  StopStringMatcher m({"cd", "bc", "bcd"});
  auto match = m.find("abcde", 0);
  ASSERT_TRUE(match);
  EXPECT_EQ(match->pos, 1u);
  EXPECT_EQ(match->index, 2);
  EXPECT_FALSE(m.find("abcde", 3));
  EXPECT_FALSE(m.find("xyz", 0));
}

// --- The stream --------------------------------------------------------------

// Vocabulary of the scripted tests. Token ids index this table.
enum Tok : std::int32_t {
  kEos = 0,
  kHel,
  kLo,
  kSpaceWor,
  kLd,
  kLt,     // "<"
  kSlash,  // "/"
  kS,      // "s"
  kGt,     // ">"
  kLtSlash,
  kB,        // "b"
  kEAcute1,  // first byte of "é"
  kEAcute2,  // second byte of "é"
  kStopId,   // a token listed in stop_token_ids
  kFiller,   // "."
  kPrompt0,  // prompts start with one of these (they pick the script)
  kVocabSize = kPrompt0 + 16,
};

std::vector<std::string> pieces() {
  std::vector<std::string> p(kVocabSize, "?");
  p[kEos] = "<eos>";
  p[kHel] = "Hel";
  p[kLo] = "lo";
  p[kSpaceWor] = " wor";
  p[kLd] = "ld";
  p[kLt] = "<";
  p[kSlash] = "/";
  p[kS] = "s";
  p[kGt] = ">";
  p[kLtSlash] = "</";
  p[kB] = "b";
  p[kEAcute1] = "\xC3";
  p[kEAcute2] = "\xA9";
  p[kStopId] = "[STOP]";
  p[kFiller] = ".";
  return p;
}

// StopParams with max_tokens and stop strings; `edit` sets the rest.
StopParams stops(int max_tokens, std::vector<std::string> strings = {},
                 const std::function<void(StopParams&)>& edit = {}) {
  StopParams p;
  p.max_tokens = max_tokens;
  p.stop = std::move(strings);
  if (edit) edit(p);
  return p;
}

struct Deltas {
  std::vector<std::string> texts;  // one per step that produced a delta
  std::string text;                // all of them
  std::vector<std::int32_t> tokens;
  RequestOutput last;
};

// Runs one scripted request to completion, stepping by hand and popping the
// stream after every step.
// Every stop-rule case runs in the synchronous and in the pipelined loop.
class StopRulesTest : public ::testing::TestWithParam<bool> {
 protected:
  Deltas run(std::vector<std::int32_t> script, StopParams stop, int max_model_len = 0,
             SamplingParams sampling = {}) {
    ScriptedModel model({{kPrompt0, script}}, kFiller);
    FakeKvCache kv(4, 64, 16, 1024);
    EngineConfig config;
    config.scheduler = {.max_num_seqs = 4, .max_num_batched_tokens = 64};
    config.eos_token_ids = {kEos};
    config.max_model_len = max_model_len;
    config.async_scheduling = GetParam();
    auto engine = Engine::create(config, model, kv, decoders_);
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    sampling.temperature = 0.0f;
    RequestSpec spec;
    spec.prompt_token_ids = {kPrompt0, kHel};
    spec.sampling = sampling;
    spec.stop = std::move(stop);
    auto stream = (*engine)->submit(std::move(spec));
    EXPECT_TRUE(stream.ok()) << stream.status().to_string();
    Deltas d;
    RequestOutput out;
    for (int i = 0; i < 100 && !d.last.finished; ++i) {
      (*engine)->step();
      if ((*stream)->try_pop(out)) {
        d.texts.push_back(out.text);
        d.text += out.text;
        d.tokens.insert(d.tokens.end(), out.token_ids.begin(), out.token_ids.end());
        d.last = out;
      }
    }
    EXPECT_TRUE(d.last.finished);
    // Pipelined, a stop string ends the request while its next step runs:
    // the slot is freed when that step is collected, and nothing more streams.
    for (int i = 0; i < 2 && (*engine)->has_work(); ++i) (*engine)->step();
    EXPECT_FALSE((*engine)->has_work());
    EXPECT_FALSE((*stream)->try_pop(out));
    EXPECT_EQ(kv.slots_in_use(), 0);
    return d;
  }

  ByteDecoderFactory decoders_{pieces()};
};

TEST_P(StopRulesTest, AStopStringAcrossFourTokensIsHeldBackThenCut) {
  const Deltas d = run({kLo, kSpaceWor, kLd, kLt, kSlash, kS, kGt, kHel}, stops(20, {"</s>"}));
  // "lo", " wor", "ld", then "<", "/", "s" are held back, ">" completes the stop.
  EXPECT_EQ(d.texts, (std::vector<std::string>{"lo", " wor", "ld", "", "", "", ""}));
  EXPECT_EQ(d.text, "lo world");
  EXPECT_EQ(d.last.finish_reason, FinishReason::stop);
  EXPECT_EQ(d.last.stop_string, "</s>");
  EXPECT_FALSE(d.last.stop_token);
  // Token ids are not held back: the stream has every generated token.
  EXPECT_EQ(d.tokens, (std::vector<std::int32_t>{kLo, kSpaceWor, kLd, kLt, kSlash, kS, kGt}));
  EXPECT_EQ(d.last.num_generated_tokens, 7);
  EXPECT_EQ(d.last.num_prompt_tokens, 2);
}

TEST_P(StopRulesTest, IncludeStopStrInOutputKeepsTheStopAndDropsWhatFollows) {
  // "</" + "s" + ">lo": the token completing the stop carries extra text.
  const Deltas d =
      run({kLo, kLtSlash, kS, kGt, kLo},
          stops(20, {"</s>"}, [](StopParams& p) { p.include_stop_str_in_output = true; }));
  EXPECT_EQ(d.text, "lo</s>");
  EXPECT_EQ(d.last.stop_string, "</s>");
}

TEST_P(StopRulesTest, AFalseAlarmReleasesTheHeldText) {
  const Deltas d = run({kLt, kSlash, kB, kLd}, stops(4, {"</s>"}));
  EXPECT_EQ(d.texts, (std::vector<std::string>{"", "", "</b", "ld"}));
  EXPECT_EQ(d.last.finish_reason, FinishReason::length);
}

TEST_P(StopRulesTest, HeldTextIsReleasedWhenTheRequestEndsOtherwise) {
  // max_tokens ends it while "</" is held: it was not a stop, so it is sent.
  const Deltas d = run({kLo, kLtSlash}, stops(2, {"</s>"}));
  EXPECT_EQ(d.texts, (std::vector<std::string>{"lo", "</"}));
  EXPECT_EQ(d.last.finish_reason, FinishReason::length);
}

TEST_P(StopRulesTest, AStopStringInsideOneTokenCutsMidToken) {
  const Deltas d = run({kSpaceWor, kLd, kHel}, stops(20, {"or"}));
  EXPECT_EQ(d.text, " w");
  EXPECT_EQ(d.last.stop_string, "or");
}

TEST_P(StopRulesTest, TheEarliestOfSeveralStopStringsWins) {
  const Deltas d = run({kLo, kSpaceWor, kLd}, stops(20, {"ld", "wor", "o w"}));
  EXPECT_EQ(d.text, "l");
  EXPECT_EQ(d.last.stop_string, "o w");
}

TEST_P(StopRulesTest, AUtf8CharacterSplitAcrossTokensIsNeverCut) {
  const Deltas d = run({kEAcute1, kEAcute2, kEAcute1}, stops(3));
  // "\xC3" alone is not text yet; the dangling byte at the end becomes U+FFFD.
  EXPECT_EQ(d.texts, (std::vector<std::string>{"", "\xC3\xA9", "\xEF\xBF\xBD"}));
}

TEST_P(StopRulesTest, EosStopsWithoutItsText) {
  const Deltas d = run({kLo, kEos, kLo}, stops(20));
  EXPECT_EQ(d.text, "lo");
  EXPECT_EQ(d.last.finish_reason, FinishReason::stop);
  EXPECT_EQ(d.last.stop_token, kEos);
  EXPECT_EQ(d.tokens, (std::vector<std::int32_t>{kLo, kEos}));
}

TEST_P(StopRulesTest, IgnoreEosRunsToMaxTokens) {
  const Deltas d = run({kLo, kEos, kLd}, stops(3, {}, [](StopParams& p) { p.ignore_eos = true; }));
  EXPECT_EQ(d.text, "lo<eos>ld");
  EXPECT_EQ(d.last.finish_reason, FinishReason::length);
}

TEST_P(StopRulesTest, StopTokenIdsStopAndIncludeTheirTextOnlyOnRequest) {
  Deltas d =
      run({kLo, kStopId, kLd}, stops(20, {}, [](StopParams& p) { p.stop_token_ids = {kStopId}; }));
  EXPECT_EQ(d.text, "lo");
  EXPECT_EQ(d.last.stop_token, kStopId);
  d = run({kLo, kStopId, kLd}, stops(20, {}, [](StopParams& p) {
            p.stop_token_ids = {kStopId};
            p.include_stop_str_in_output = true;
          }));
  EXPECT_EQ(d.text, "lo[STOP]");
}

TEST_P(StopRulesTest, MinTokensSuppressesEarlyStops) {
  // EOS at 0 and 1 is suppressed (the model double samples the filler
  // instead); the stop string in token 2 is ignored, the one in token 4 is not.
  const Deltas d = run({kEos, kEos, kSpaceWor, kLo, kSpaceWor, kLd},
                       stops(20, {"wor"}, [](StopParams& p) { p.min_tokens = 4; }));
  EXPECT_EQ(d.tokens, (std::vector<std::int32_t>{kFiller, kFiller, kSpaceWor, kLo, kSpaceWor}));
  EXPECT_EQ(d.text, ".. worlo ");
  EXPECT_EQ(d.last.finish_reason, FinishReason::stop);
}

TEST_P(StopRulesTest, MaxModelLenEndsWithLength) {
  // Prompt of 2 tokens, context of 5: three tokens, although max_tokens is 10.
  const Deltas d = run({kLo, kLo, kLo, kLo, kLo}, stops(10), /*max_model_len=*/5);
  EXPECT_EQ(d.tokens.size(), 3u);
  EXPECT_EQ(d.last.finish_reason, FinishReason::length);
}

TEST_P(StopRulesTest, LogprobsArriveWithTheirTokens) {
  SamplingParams sampling;
  sampling.logprobs = 2;
  const Deltas d = run({kLo, kLd, kHel}, stops(3), 0, sampling);
  EXPECT_EQ(d.last.logprobs.size(), 1u);  // per delta: one token per step here
  EXPECT_EQ(d.last.logprobs[0].token, kHel);
  EXPECT_EQ(d.last.logprobs[0].num_top, 2);
  EXPECT_FLOAT_EQ(d.last.logprobs[0].logprob, -1.0f);
}

INSTANTIATE_TEST_SUITE_P(Loops, StopRulesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Pipelined" : "Synchronous";
                         });

}  // namespace
}  // namespace vpod::engine
