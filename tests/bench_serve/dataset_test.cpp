#include "bench/serve/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace vpod::bench::serve {
namespace {

double sample_quantile(std::vector<int> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * (v.size() - 1))];
}

TEST(RandomLengths, RangeRatioBoundsAreInclusiveAndAllValuesOccur) {
  RandomLengths spec{.input_len = 100, .output_len = 10, .range_ratio = 0.25};
  const auto lengths = sample_random_lengths(20000, spec, 1);
  std::set<int> inputs, outputs;
  for (const auto& r : lengths) {
    inputs.insert(r.input_len);
    outputs.insert(r.output_len);
  }
  // [floor(75), ceil(125)] and [floor(7.5), ceil(12.5)] = [7, 13], all hit.
  EXPECT_EQ(*inputs.begin(), 75);
  EXPECT_EQ(*inputs.rbegin(), 125);
  EXPECT_EQ(inputs.size(), 51u);
  EXPECT_EQ(*outputs.begin(), 7);
  EXPECT_EQ(*outputs.rbegin(), 13);
  EXPECT_EQ(outputs.size(), 7u);
}

TEST(RandomLengths, ZeroRangeIsFixedAndBadSpecsAreRejected) {
  const auto fixed = sample_random_lengths(50, {.input_len = 8192, .output_len = 82}, 2);
  for (const auto& r : fixed) {
    EXPECT_EQ(r.input_len, 8192);
    EXPECT_EQ(r.output_len, 82);
  }
  EXPECT_FALSE(validate(RandomLengths{.input_len = 0}).ok());
  EXPECT_FALSE(validate(RandomLengths{.output_len = 0}).ok());
  EXPECT_FALSE(validate(RandomLengths{.range_ratio = 1.0}).ok());
  EXPECT_FALSE(validate(RandomLengths{.range_ratio = -0.1}).ok());
}

TEST(TruncatedLogNormal, FitHitsBothQuantilesBelowTheCap) {
  const auto d = fit_truncated_lognormal(7059, 12985, 15360);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_NEAR(d->median(), 7059, 1e-3);
  EXPECT_NEAR(d->quantile(0.9), 12985, 1e-3);
  EXPECT_LT(d->quantile(0.999999), 15360.0 + 1e-6);
  // Without a binding cap, the fit is the plain log-normal: sigma = ln(p90/m) / z_0.9.
  const auto plain = fit_truncated_lognormal(100, 200, 1e12);
  ASSERT_TRUE(plain.ok());
  EXPECT_NEAR(plain->sigma, std::log(2.0) / 1.2815515655446004, 1e-9);
  EXPECT_NEAR(plain->mu, std::log(100.0), 1e-9);
  EXPECT_FALSE(fit_truncated_lognormal(100, 50, 1000).ok());
  EXPECT_FALSE(fit_truncated_lognormal(100, 200, 150).ok());
}

TEST(ArxivLengths, SamplesReproduceThePapersMedianAndP90) {
  const auto lengths = sample_arxiv_lengths(60000, {}, 3);
  std::vector<int> inputs, outputs;
  for (const auto& r : lengths) {
    inputs.push_back(r.input_len);
    outputs.push_back(r.output_len);
    ASSERT_GE(r.input_len, 1);
    ASSERT_GE(r.output_len, 1);
    ASSERT_LE(r.input_len + r.output_len, 16384);
  }
  EXPECT_NEAR(sample_quantile(inputs, 0.5), kArxivPromptMedian, 0.02 * kArxivPromptMedian);
  EXPECT_NEAR(sample_quantile(inputs, 0.9), kArxivPromptP90, 0.02 * kArxivPromptP90);
  EXPECT_NEAR(sample_quantile(outputs, 0.5), kArxivOutputMedian, 0.02 * kArxivOutputMedian);
  EXPECT_NEAR(sample_quantile(outputs, 0.9), kArxivOutputP90, 0.02 * kArxivOutputP90);
  EXPECT_LE(*std::max_element(outputs.begin(), outputs.end()), kArxivMaxOutput);
}

TEST(ArxivLengths, LargerContextKeepsTheDistributionAndSmallOnesAreRejected) {
  EXPECT_TRUE(validate(ArxivLengths{.max_total = 32768}).ok());
  EXPECT_FALSE(validate(ArxivLengths{.max_total = 8192}).ok());
  const auto lengths = sample_arxiv_lengths(1000, {.max_total = 32768}, 4);
  for (const auto& r : lengths) EXPECT_LE(r.input_len + r.output_len, 32768);
}

TEST(PdRatio, OutputTokensArePromptOverRatioRoundedAndAtLeastOne) {
  EXPECT_EQ(output_len_for_pd_ratio(16384, 50), 328);   // 327.68
  EXPECT_EQ(output_len_for_pd_ratio(16384, 100), 164);  // 163.84
  EXPECT_EQ(output_len_for_pd_ratio(8192, 500), 16);    // 16.384
  EXPECT_EQ(output_len_for_pd_ratio(100, 1000), 1);
}

TEST(TraceCsv, ReadsVidurColumnsInAnyOrder) {
  const auto trace = parse_trace_csv(
      "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
      "3772,54,3826,69.85185185185185\r\n"
      "\n"
      "2015.0,156,2171,12.9\n");
  ASSERT_TRUE(trace.ok()) << trace.status().to_string();
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_EQ((*trace)[0].input_len, 3772);
  EXPECT_EQ((*trace)[0].output_len, 54);
  EXPECT_EQ((*trace)[1].input_len, 2015);
  const auto swapped = parse_trace_csv("output_len, input_len\n7, 9\n");
  ASSERT_TRUE(swapped.ok());
  EXPECT_EQ((*swapped)[0].input_len, 9);
  EXPECT_EQ((*swapped)[0].output_len, 7);
}

TEST(TraceCsv, RejectsBadTraces) {
  for (const char* bad : {"", "a,b\n1,2\n", "input_len,output_len\n", "input_len,output_len\n1\n",
                          "input_len,output_len\n0,5\n", "input_len,output_len\n1.5,5\n",
                          "input_len,output_len\nx,5\n"}) {
    EXPECT_FALSE(parse_trace_csv(bad).ok()) << bad;
  }
}

TEST(PromptIds, ExactLengthDrawnFromThePool) {
  const std::vector<std::int32_t> pool = {11, 22, 33};
  std::mt19937_64 rng(5);
  const auto ids = make_prompt_ids(pool, 3000, rng);
  ASSERT_EQ(ids.size(), 3000u);
  std::map<std::int32_t, int> counts;
  for (auto id : ids) counts[id]++;
  ASSERT_EQ(counts.size(), 3u);
  for (const auto& [id, n] : counts) {
    EXPECT_TRUE(id == 11 || id == 22 || id == 33);
    EXPECT_NEAR(n, 1000, 100);
  }
  EXPECT_TRUE(make_prompt_ids(pool, 0, rng).empty());
}

}  // namespace
}  // namespace vpod::bench::serve
