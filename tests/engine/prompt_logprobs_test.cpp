// Prompt logprobs through the engine loop over the doubles: every prompt
// token after the first gets the model's logprob at its position, across
// chunked prefills and in every loop mode, delivered once with the first
// delta; a max_tokens 0 request only scores its prompt; such requests never
// take a prefix-cache hit (their blocks still serve others).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine_doubles.h"
#include "engine_rig.h"

namespace vpod::engine {
namespace {

using namespace testing;  // the doubles and the rig (engine_rig.h)

std::vector<std::int32_t> prompt_of(int len, std::int32_t first) {
  std::vector<std::int32_t> p(len);
  for (int i = 0; i < len; ++i) p[i] = 1 + (first + 5 * i) % (kVocab - 1);
  return p;
}

RequestSpec scoring(std::vector<std::int32_t> prompt, int max_tokens, int top) {
  RequestSpec spec;
  spec.prompt_token_ids = std::move(prompt);
  spec.sampling.temperature = 0.0f;
  spec.sampling.prompt_logprobs = top;
  spec.stop.max_tokens = max_tokens;
  spec.stop.ignore_eos = true;
  return spec;
}

struct Collected {
  std::vector<RequestOutput> deltas;
  std::vector<std::int32_t> tokens;
};

Collected run_to_end(Rig& rig, const std::shared_ptr<RequestStream>& stream) {
  while (rig.engine->has_work()) rig.engine->step();
  Collected c;
  RequestOutput out;
  while (stream->try_pop(out)) {
    c.tokens.insert(c.tokens.end(), out.token_ids.begin(), out.token_ids.end());
    c.deltas.push_back(out);
  }
  return c;
}

// What the model reports for prompt token p + 1 given tokens [0, p].
void expect_prompt_logprobs(const std::vector<SampledToken>& got,
                            const std::vector<std::int32_t>& prompt, int top) {
  ASSERT_EQ(got.size(), prompt.size() - 1);
  for (std::size_t p = 0; p + 1 < prompt.size(); ++p) {
    const SampledToken want =
        HashModel::prompt_score(std::span(prompt).first(p + 1), prompt[p + 1], top, kVocab);
    EXPECT_EQ(got[p].token, want.token) << p;
    EXPECT_EQ(got[p].logprob, want.logprob) << p;
    EXPECT_EQ(got[p].rank, want.rank) << p;
    ASSERT_EQ(got[p].num_top, top) << p;
    for (int k = 0; k < top; ++k) EXPECT_EQ(got[p].top[k].token, want.top[k].token) << p;
  }
}

TEST(PromptLogprobs, EveryPositionOnceAcrossChunksInEveryLoopMode) {
  for (const Mode mode :
       {Mode{.async = false}, Mode{.async = true}, Mode{.async = true, .worker = true}}) {
    SCOPED_TRACE(mode_name(mode));
    // A 16-token budget: the 45-token prompt runs in three chunks, beside a
    // second request's decodes.
    Rig rig(mode, 4, 64, 4, 16, 256);
    const std::vector<std::int32_t> prompt = prompt_of(45, 2);
    auto other = *rig.engine->submit(scoring(prompt_of(9, 7), 30, 0));
    auto stream = *rig.engine->submit(scoring(prompt, 6, 3));
    const Collected c = run_to_end(rig, stream);
    ASSERT_FALSE(c.deltas.empty());
    expect_prompt_logprobs(c.deltas.front().prompt_logprobs, prompt, 3);
    // They ride with the first token (pushed once: a second push would be
    // merged into the same pop and double their count).
    EXPECT_FALSE(c.deltas.front().token_ids.empty());
    for (std::size_t i = 1; i < c.deltas.size(); ++i)
      EXPECT_TRUE(c.deltas[i].prompt_logprobs.empty());
    EXPECT_EQ(c.tokens.size(), 6u);
    EXPECT_TRUE(c.deltas.back().finished);
    const Collected o = run_to_end(rig, other);
    ASSERT_FALSE(o.deltas.empty());
    expect_prompt_logprobs(o.deltas.front().prompt_logprobs, prompt_of(9, 7), 0);
  }
}

// Scoring changes nothing else: the tokens are those of the same request
// without prompt logprobs.
TEST(PromptLogprobs, GeneratedTokensAreUnchanged) {
  Rig rig({.async = true}, 4, 64, 4, 16, 256);
  RequestSpec plain = scoring(prompt_of(30, 4), 12, 0);
  plain.sampling.prompt_logprobs.reset();
  const Collected a = run_to_end(rig, *rig.engine->submit(plain));
  const Collected b = run_to_end(rig, *rig.engine->submit(scoring(prompt_of(30, 4), 12, 5)));
  EXPECT_EQ(a.tokens, b.tokens);
  for (const RequestOutput& d : a.deltas) EXPECT_TRUE(d.prompt_logprobs.empty());
}

TEST(PromptLogprobs, MaxTokensZeroScoresThePromptAndGeneratesNothing) {
  for (const Mode mode : {Mode{.async = false}, Mode{.async = true, .worker = true}}) {
    SCOPED_TRACE(mode_name(mode));
    Rig rig(mode, 4, 64, 4, 16, 256);
    const std::vector<std::int32_t> prompt = prompt_of(40, 9);
    auto stream = *rig.engine->submit(scoring(prompt, 0, 2));
    const Collected c = run_to_end(rig, stream);
    ASSERT_EQ(c.deltas.size(), 1u);
    const RequestOutput& d = c.deltas.front();
    EXPECT_TRUE(d.finished);
    EXPECT_EQ(d.finish_reason, FinishReason::length);
    EXPECT_TRUE(d.token_ids.empty());
    EXPECT_TRUE(d.text.empty());
    EXPECT_EQ(d.num_prompt_tokens, 40);
    EXPECT_EQ(d.num_generated_tokens, 0);
    expect_prompt_logprobs(d.prompt_logprobs, prompt, 2);
    EXPECT_EQ(rig.kv.slots_in_use(), 0);
    const MetricsSnapshot m = rig.engine->metrics();
    EXPECT_EQ(m.generation_tokens, 0u);
    EXPECT_EQ(m.prompt_tokens, 40u);
    // A one-token prompt has nothing to score and still ends.
    const Collected one = run_to_end(rig, *rig.engine->submit(scoring({5}, 0, 1)));
    ASSERT_EQ(one.deltas.size(), 1u);
    EXPECT_TRUE(one.deltas.front().finished);
    EXPECT_TRUE(one.deltas.front().prompt_logprobs.empty());
  }
}

TEST(PromptLogprobs, MaxTokensZeroWithoutThemIsRefused) {
  Rig rig({.async = true}, 4, 64, 4, 16, 256);
  RequestSpec spec = scoring(prompt_of(10, 1), 0, 0);
  spec.sampling.prompt_logprobs.reset();
  const auto submitted = rig.engine->submit(spec);
  ASSERT_FALSE(submitted.ok());
  EXPECT_NE(submitted.status().message().find("max_tokens"), std::string::npos);
  spec.sampling.prompt_logprobs = kMaxTopLogprobs + 1;
  spec.stop.max_tokens = 4;
  EXPECT_FALSE(rig.engine->submit(spec).ok());
}

// The prompt is cached by a plain request; one that asks for prompt logprobs
// takes no hit (every position is computed and scored), and its own blocks
// serve the next plain request.
TEST(PromptLogprobs, TakeNoPrefixCacheHitButFeedTheCache) {
  Rig rig({.caching = true, .async = true}, 4, 64, 4, 64, 256);
  const std::vector<std::int32_t> prompt = prompt_of(45, 3);
  RequestSpec plain = scoring(prompt, 3, 0);
  plain.sampling.prompt_logprobs.reset();
  run_to_end(rig, *rig.engine->submit(plain));
  const Collected scored = run_to_end(rig, *rig.engine->submit(scoring(prompt, 3, 1)));
  ASSERT_FALSE(scored.deltas.empty());
  EXPECT_EQ(scored.deltas.back().num_cached_tokens, 0);
  expect_prompt_logprobs(scored.deltas.front().prompt_logprobs, prompt, 1);
  const Collected again = run_to_end(rig, *rig.engine->submit(plain));
  EXPECT_EQ(again.deltas.back().num_cached_tokens, 40);
}

}  // namespace
}  // namespace vpod::engine
