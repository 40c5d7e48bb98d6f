// The CPU sampler: greedy, temperature (frequencies follow the softmax),
// top-k / top-p / min-p supports, penalties, logprobs and reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kernels/sampling/sampling.h"

namespace vpod::kernels {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f, -1.0f};

std::map<int, int> histogram(const SamplingConfig& base, int draws) {
  std::map<int, int> h;
  SamplingConfig c = base;
  for (int i = 0; i < draws; ++i) {
    c.index = static_cast<std::uint64_t>(i);
    ++h[sample_ref(kLogits, c, {}, {}).token];
  }
  return h;
}

TEST(Sampling, GreedyTakesArgmaxWithLogprobs) {
  SamplingConfig c;
  c.temperature = 0.0f;
  c.num_top_logprobs = 3;
  const SampleResult r = sample_ref(kLogits, c, {}, {});
  EXPECT_EQ(r.token, 1);
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  EXPECT_NEAR(r.logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 4);
  EXPECT_EQ(r.top[2].token, 2);
}

TEST(Sampling, FrequenciesFollowTheSoftmax) {
  SamplingConfig c;
  c.temperature = 0.7f;
  c.seed = 42;
  const int draws = 20000;
  const auto h = histogram(c, draws);
  double z = 0;
  for (float l : kLogits) z += std::exp(l / 0.7);
  for (int id = 0; id < static_cast<int>(kLogits.size()); ++id) {
    const double p = std::exp(kLogits[id] / 0.7) / z;
    const double got = h.count(id) ? h.at(id) / static_cast<double>(draws) : 0.0;
    EXPECT_NEAR(got, p, 4 * std::sqrt(p * (1 - p) / draws) + 1e-3) << "token " << id;
  }
}

TEST(Sampling, TopKTopPMinPRestrictTheSupport) {
  SamplingConfig c;
  c.seed = 1;
  c.top_k = 2;
  for (const auto& [id, n] : histogram(c, 2000)) EXPECT_TRUE(id == 1 || id == 4) << id;
  c.top_k = 0;
  c.top_p = 0.5f;  // p(1) ~ 0.38, p(4) ~ 0.35: the first two reach 0.5
  for (const auto& [id, n] : histogram(c, 2000)) EXPECT_TRUE(id == 1 || id == 4) << id;
  c.top_p = 1.0f;
  c.min_p = 0.3f;  // keeps tokens with p >= 0.3 p_max: logits >= 3 + ln 0.3 = 1.80
  for (const auto& [id, n] : histogram(c, 2000)) EXPECT_TRUE(id == 1 || id == 4 || id == 2) << id;
  EXPECT_EQ(histogram(c, 2000).size(), 3u);
}

TEST(Sampling, SameSeedAndIndexSameToken) {
  SamplingConfig c;
  c.seed = 7;
  c.index = 3;
  const int a = sample_ref(kLogits, c, {}, {}).token;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sample_ref(kLogits, c, {}, {}).token, a);
  int differ = 0;
  for (std::uint64_t s = 0; s < 50; ++s) {
    c.seed = s;
    differ += sample_ref(kLogits, c, {}, {}).token != a;
  }
  EXPECT_GT(differ, 0);
}

TEST(Sampling, PenaltiesAndSuppression) {
  SamplingConfig c;
  c.temperature = 0.0f;
  const std::vector<std::int32_t> out = {1, 1};
  c.repetition_penalty = 2.0f;  // 3.0 -> 1.5: token 4 (2.9) wins
  EXPECT_EQ(sample_ref(kLogits, c, {}, out).token, 4);
  c.repetition_penalty = 1.0f;
  c.frequency_penalty = 0.06f;  // 3.0 - 0.12 = 2.88 < 2.9
  EXPECT_EQ(sample_ref(kLogits, c, {}, out).token, 4);
  c.frequency_penalty = 0.0f;
  c.presence_penalty = 0.05f;  // 2.95 > 2.9: still 1
  EXPECT_EQ(sample_ref(kLogits, c, {}, out).token, 1);
  c.presence_penalty = 0.0f;
  const std::vector<std::int32_t> suppressed = {1, 4};
  EXPECT_EQ(sample_ref(kLogits, c, {}, {}, suppressed).token, 2);
  c.repetition_penalty = 2.0f;  // the prompt counts too
  const std::vector<std::int32_t> prompt = {1};
  EXPECT_EQ(sample_ref(kLogits, c, prompt, {}).token, 4);
}

// logit_bias is added before penalties and logprobs: +100 forces a token,
// -100 bans the argmax, and the logprobs are of the biased distribution.
TEST(Sampling, LogitBias) {
  SamplingConfig c;
  c.temperature = 0.0f;
  c.num_top_logprobs = 2;
  const std::vector<LogitBias> force = {{5, 100.0f}};  // the least likely token
  SampleResult r = sample_ref(kLogits, c, {}, {}, {}, force);
  EXPECT_EQ(r.token, 5);
  EXPECT_NEAR(r.logprob, 0.0f, 1e-6f);
  EXPECT_EQ(r.top[0].token, 5);
  const std::vector<LogitBias> ban = {{1, -100.0f}};
  r = sample_ref(kLogits, c, {}, {}, {}, ban);
  EXPECT_EQ(r.token, 4);
  std::vector<float> biased = kLogits;
  biased[1] -= 100.0f;
  double z = 0;
  for (float l : biased) z += std::exp(static_cast<double>(l));
  EXPECT_NEAR(r.logprob, 2.9 - std::log(z), 1e-5);
  EXPECT_NEAR(r.top[1].logprob, 2.0 - std::log(z), 1e-5);
  // A small bias moves the draw: 2.9 + 0.2 > 3.0.
  EXPECT_EQ(sample_ref(kLogits, c, {}, {}, {}, std::vector<LogitBias>{{4, 0.2f}}).token, 4);
  // Suppression wins over any bias.
  const std::vector<std::int32_t> suppressed = {5};
  EXPECT_NE(sample_ref(kLogits, c, {}, {}, suppressed, force).token, 5);
  // The bias comes before the repetition penalty (vLLM v1's order).
  c.repetition_penalty = 2.0f;
  const std::vector<std::int32_t> history = {0};
  const std::vector<LogitBias> lift = {{0, 6.0f}};  // (1 + 6) / 2 = 3.5 > 3.0: 0 wins
  EXPECT_EQ(sample_ref(kLogits, c, history, {}, {}, lift).token, 0);
  const std::vector<LogitBias> less = {{0, 4.0f}};  // (1 + 4) / 2 = 2.5 < 3.0: 1 wins
  EXPECT_EQ(sample_ref(kLogits, c, history, {}, {}, less).token, 1);
  // Random draws: +100 forces the token whatever the seed; -100 removes it.
  c.repetition_penalty = 1.0f;
  c.temperature = 1.0f;
  for (std::uint64_t i = 0; i < 200; ++i) {
    c.index = i;
    EXPECT_EQ(sample_ref(kLogits, c, {}, {}, {}, force).token, 5);
    EXPECT_NE(sample_ref(kLogits, c, {}, {}, {}, ban).token, 1);
  }
}

// Structured output: ids the token bitmask disallows are -inf before
// anything else, so no bias or penalty brings them back, the logprobs are
// those of the allowed ids, and every draw is an allowed id.
TEST(Sampling, TokenBitmask) {
  SamplingConfig c;
  c.temperature = 0.0f;
  c.num_top_logprobs = 3;
  const std::vector<std::uint32_t> mask = {(1u << 2) | (1u << 4) | (1u << 5)};  // ids 2, 4, 5
  SampleResult r = sample_ref(kLogits, c, {}, {}, {}, {}, mask);
  EXPECT_EQ(r.token, 4);  // 1 (3.0) is disallowed; 4 (2.9) is the best allowed
  const double z = std::exp(2.0) + std::exp(2.9) + std::exp(-1.0);
  EXPECT_NEAR(r.logprob, 2.9 - std::log(z), 1e-5);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 4);
  EXPECT_EQ(r.top[1].token, 2);
  EXPECT_EQ(r.top[2].token, 5);
  EXPECT_NEAR(r.top[2].logprob, -1.0 - std::log(z), 1e-5);
  // A +100 bias or a repetition penalty on a disallowed id changes nothing.
  const std::vector<LogitBias> force = {{1, 100.0f}, {0, 100.0f}};
  EXPECT_EQ(sample_ref(kLogits, c, {}, {}, {}, force, mask).token, 4);
  c.repetition_penalty = 0.5f;  // would lift negative logits of seen ids
  const std::vector<std::int32_t> seen = {0, 3};
  EXPECT_EQ(sample_ref(kLogits, c, seen, {}, {}, {}, mask).token, 4);
  c.repetition_penalty = 1.0f;
  // Suppression still applies inside the mask; the bias still moves allowed ids.
  const std::vector<std::int32_t> suppressed = {4};
  EXPECT_EQ(sample_ref(kLogits, c, {}, {}, suppressed, {}, mask).token, 2);
  EXPECT_EQ(sample_ref(kLogits, c, {}, {}, {}, std::vector<LogitBias>{{5, 5.0f}}, mask).token, 5);
  // Random draws with filters: always an allowed id, and each allowed id occurs.
  c.temperature = 1.5f;
  c.top_k = 2;
  std::map<int, int> h;
  for (std::uint64_t i = 0; i < 400; ++i) {
    c.index = i;
    ++h[sample_ref(kLogits, c, {}, {}, {}, {}, mask).token];
  }
  EXPECT_EQ(h.size(), 2u);  // top-2 of the allowed: 4 and 2
  EXPECT_GT(h[4], 0);
  EXPECT_GT(h[2], 0);
  // An empty mask constrains nothing.
  c.temperature = 0.0f;
  c.top_k = 0;
  EXPECT_EQ(sample_ref(kLogits, c, {}, {}, {}, {}, {}).token, 1);
}

// The largest uniform, 1 - 2^-25, stays below 1 (in float it rounded to 1,
// giving +inf noise: a random token on about vocab / 2^24 of the draws, even
// against a +100 bias). Found by search: ~2^24 ids on average.
TEST(Sampling, LargestUniformStaysBelowOne) {
  const double largest = 1.0 - 1.0 / 33554432.0;
  std::int32_t id = 0;
  while (id < (1 << 28) && sampling_uniform(3, 0, id) != largest) ++id;
  ASSERT_LT(id, 1 << 28) << "no id draws the largest uniform";
  EXPECT_LT(sampling_uniform(3, 0, id), 1.0);
  EXPECT_TRUE(std::isfinite(sampling_gumbel(3, 0, id)));
  EXPECT_GT(sampling_gumbel(3, 0, id), 17.0f);  // -log(-log(1 - 2^-25)) = 17.33
  // So no noise reaches a +100 logit bias: g is in [-2.9, 17.4] for every u.
  EXPECT_LT(sampling_gumbel(3, 0, id), 17.4f) << "id " << id;
}

TEST(Sampling, ReusedWorkspaceLeavesNoStateBehind) {
  SamplingWorkspace ws(static_cast<int>(kLogits.size()));
  SampleResult out;
  SamplingConfig penalized;
  penalized.temperature = 0.0f;
  penalized.repetition_penalty = 2.0f;
  penalized.frequency_penalty = 1.0f;
  const std::vector<std::int32_t> history = {1, 4, 4, 2};
  sample(kLogits, penalized, history, history, {}, {}, {}, ws, out);
  EXPECT_EQ(out.token, sample_ref(kLogits, penalized, history, history).token);
  // The next call, with no penalties, sees none of the previous one's counts.
  SamplingConfig plain;
  plain.temperature = 0.9f;
  plain.top_k = 3;
  plain.num_top_logprobs = 2;
  for (std::uint64_t i = 0; i < 20; ++i) {
    plain.index = i;
    sample(kLogits, plain, {}, {}, {}, {}, {}, ws, out);
    const SampleResult want = sample_ref(kLogits, plain, {}, {});
    EXPECT_EQ(out.token, want.token);
    ASSERT_EQ(out.top.size(), 2u);
    EXPECT_EQ(out.top[0].token, want.top[0].token);
  }
}

}  // namespace
}  // namespace vpod::kernels
