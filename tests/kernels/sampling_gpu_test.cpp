// The GPU sampler against the CPU reference (sample_ref) on fixed seeds and
// distributions: the same token for greedy and, since both draw the same
// counter-based uniforms, for every random configuration too; logprobs to
// float rounding; the same top-N ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda/device_buffer.h"
#include "kernels/sampling/sampling.h"
#include "kernels/sampling/sampling_gpu.h"
#include "support/gpu.h"

namespace vpod::kernels {
namespace {

enum class Shape { normal, peaked, quantized, with_suppressed_tail };

std::vector<float> make_logits(int vocab, Shape shape, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(static_cast<std::size_t>(vocab));
  for (int i = 0; i < vocab; ++i) {
    float v = normal(rng);
    switch (shape) {
      case Shape::normal: break;
      case Shape::peaked: v = i % 97 == 5 ? 12.0f + 0.01f * static_cast<float>(i % 7) : v; break;
      // Many exact ties (multiples of 0.5), including at the top-k / top-p cuts.
      case Shape::quantized: v = std::round(v * 2.0f) / 2.0f; break;
      case Shape::with_suppressed_tail: v = i >= vocab - vocab / 10 ? -INFINITY : v; break;
    }
    l[static_cast<std::size_t>(i)] = v;
  }
  return l;
}

struct Config {
  std::string name;
  SamplingConfig c;
  bool penalties = false;
  bool bias = false;  // logit_bias: +100 on one id, -100 on the row's argmax, small ones
};

std::vector<Config> configs() {
  std::vector<Config> v;
  auto add = [&](std::string name, auto fill, bool penalties = false, bool bias = false) {
    Config c{std::move(name), {}, penalties, bias};
    fill(c.c);
    v.push_back(c);
  };
  add("greedy", [](SamplingConfig& c) { c.temperature = 0.0f; });
  add("greedy_top5", [](SamplingConfig& c) {
    c.temperature = 0.0f;
    c.num_top_logprobs = 5;
  });
  add("t1", [](SamplingConfig& c) { c.temperature = 1.0f; });
  add("t07_top20", [](SamplingConfig& c) {
    c.temperature = 0.7f;
    c.num_top_logprobs = 20;
  });
  add("topk50", [](SamplingConfig& c) { c.top_k = 50; });
  add("topk1", [](SamplingConfig& c) { c.top_k = 1; });
  add("topp09", [](SamplingConfig& c) { c.top_p = 0.9f; });
  add("topp03_t05", [](SamplingConfig& c) {
    c.top_p = 0.3f;
    c.temperature = 0.5f;
  });
  add("minp01", [](SamplingConfig& c) { c.min_p = 0.1f; });
  add("all_filters", [](SamplingConfig& c) {
    c.temperature = 0.8f;
    c.top_k = 200;
    c.top_p = 0.95f;
    c.min_p = 0.02f;
  });
  add(
      "penalties",
      [](SamplingConfig& c) {
        c.temperature = 0.9f;
        c.repetition_penalty = 1.3f;
        c.presence_penalty = 0.5f;
        c.frequency_penalty = 0.25f;
        c.top_p = 0.8f;
        c.num_top_logprobs = 3;
      },
      true);
  add(
      "penalties_greedy",
      [](SamplingConfig& c) {
        c.temperature = 0.0f;
        c.repetition_penalty = 1.5f;
        c.frequency_penalty = 1.0f;
      },
      true);
  add(
      "bias_greedy", [](SamplingConfig& c) { c.temperature = 0.0f; }, false, true);
  add(
      "bias_penalties_top5",
      [](SamplingConfig& c) {
        c.temperature = 0.8f;
        c.repetition_penalty = 1.3f;
        c.frequency_penalty = 0.5f;
        c.top_k = 100;
        c.num_top_logprobs = 5;
      },
      true, true);
  return v;
}

// A row's logit bias: -100 on its argmax, a few small biases (some on
// penalized or suppressed ids) and, on odd seeds, +100 on a mid-vocab id.
std::vector<LogitBias> make_bias(const std::vector<float>& row, int seed) {
  const int vocab = static_cast<int>(row.size());
  const auto argmax =
      static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  std::vector<LogitBias> b = {{argmax, -100.0f}};
  for (std::int32_t id : {2, 5, 7, 42 % vocab, 3 * seed + 11}) {
    if (id != argmax && id < vocab) b.push_back({id, 1.5f - 0.25f * static_cast<float>(id % 13)});
  }
  const auto forced = static_cast<std::int32_t>((vocab / 2 + 17 * seed) % vocab);
  if (seed % 2 == 1 && forced != argmax && forced != 2 && forced != 0) {
    bool taken = false;
    for (const LogitBias& x : b) taken |= x.token == forced;
    if (!taken) b.push_back({forced, 100.0f});
  }
  return b;
}

void run_case(GpuSampler& sampler, int vocab, Shape shape, int shape_id) {
  constexpr int kSeeds = 24;
  for (const Config& cfg : configs()) {
    // One row per seed; each row its own copy (penalties apply in place).
    std::vector<float> rows;
    std::vector<std::vector<float>> originals;
    std::vector<SampleRequest> requests;
    std::vector<std::int32_t> prompt = {1, 5, 5, 9, 100, static_cast<std::int32_t>(vocab - 1)};
    std::vector<std::int32_t> output = {5, 7, 7, 7, 42, 3 % vocab};
    std::vector<std::int32_t> suppressed = {0, 2};
    std::vector<std::vector<LogitBias>> biases(kSeeds);
    for (int s = 0; s < kSeeds; ++s) {
      originals.push_back(make_logits(vocab, shape, 1000u * shape_id + static_cast<unsigned>(s)));
      rows.insert(rows.end(), originals.back().begin(), originals.back().end());
      SampleRequest r;
      r.row = s;
      r.config = cfg.c;
      r.config.seed = 77u + static_cast<std::uint64_t>(s);
      r.config.index = static_cast<std::uint64_t>(s * 3);
      // Prompt logprobs' scoring rides on every row (it changes no draw).
      r.config.score_token = static_cast<std::int32_t>((s * 7919 + 3) % vocab);
      if (cfg.penalties) {
        r.prompt_ids = prompt;
        r.output_ids = output;
        r.suppressed_ids = suppressed;
      }
      if (cfg.bias) {
        biases[static_cast<std::size_t>(s)] = make_bias(originals.back(), s);
        r.logit_bias = biases[static_cast<std::size_t>(s)];
      }
      requests.push_back(r);
    }
    auto dev = cuda::DeviceBuffer::allocate(rows.size() * sizeof(float));
    ASSERT_TRUE(dev.ok());
    dev->copy_from_host(rows.data(), rows.size() * sizeof(float));
    const TensorView logits(dev->data(), DType::f32, {kSeeds, vocab}, Device::cuda);
    // Poisoned: a result the sampler does not write shows up as a mismatch.
    std::vector<SampleResult> got(kSeeds, SampleResult{-7, NAN, {}, NAN, -1});
    const Status st = sampler.sample(logits, requests, nullptr, got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (int s = 0; s < kSeeds; ++s) {
      const SampleRequest& r = requests[static_cast<std::size_t>(s)];
      const SampleResult want =
          sample_ref(originals[static_cast<std::size_t>(s)], r.config, r.prompt_ids, r.output_ids,
                     r.suppressed_ids, r.logit_bias);
      const std::string where = cfg.name + " vocab " + std::to_string(vocab) + " shape " +
                                std::to_string(shape_id) + " seed " + std::to_string(s);
      EXPECT_EQ(got[s].token, want.token) << where;
      if (std::isinf(want.score_logprob)) {  // a suppressed id: -inf on both
        EXPECT_EQ(got[s].score_logprob, want.score_logprob) << where;
      } else {
        EXPECT_NEAR(got[s].score_logprob, want.score_logprob,
                    1e-4f + 1e-5f * std::fabs(want.score_logprob))
            << where;
      }
      EXPECT_EQ(got[s].score_rank, want.score_rank) << where;
      EXPECT_NEAR(got[s].logprob, want.logprob, 1e-4f + 1e-5f * std::fabs(want.logprob)) << where;
      ASSERT_EQ(got[s].top.size(), want.top.size()) << where;
      for (std::size_t t = 0; t < want.top.size(); ++t) {
        EXPECT_EQ(got[s].top[t].token, want.top[t].token) << where << " top " << t;
        EXPECT_NEAR(got[s].top[t].logprob, want.top[t].logprob, 1e-4f) << where << " top " << t;
      }
    }
  }
}

TEST(GpuSampler, MatchesCpuReference) {
  VPOD_REQUIRE_GPU();
  for (int vocab : {1000, 128256}) {
    auto sampler = GpuSampler::create(32, vocab);
    ASSERT_TRUE(sampler.ok()) << sampler.status().to_string();
    int shape_id = 0;
    for (Shape shape :
         {Shape::normal, Shape::peaked, Shape::quantized, Shape::with_suppressed_tail}) {
      run_case(**sampler, vocab, shape, shape_id++);
    }
  }
}

// Random draws follow the distribution: with T = 1 and no filters, the
// frequency of each of 4 tokens over many indices is near its probability.
TEST(GpuSampler, DrawsFollowSoftmax) {
  VPOD_REQUIRE_GPU();
  const std::vector<float> base = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  constexpr int kRows = 256;
  constexpr int kRounds = 16;
  auto sampler = GpuSampler::create(kRows, 4);
  ASSERT_TRUE(sampler.ok());
  std::vector<float> rows;
  for (int r = 0; r < kRows; ++r) rows.insert(rows.end(), base.begin(), base.end());
  auto dev = cuda::DeviceBuffer::allocate(rows.size() * sizeof(float));
  ASSERT_TRUE(dev.ok());
  dev->copy_from_host(rows.data(), rows.size() * sizeof(float));
  const TensorView logits(dev->data(), DType::f32, {kRows, 4}, Device::cuda);
  int hist[4] = {0, 0, 0, 0};
  std::vector<SampleRequest> requests(kRows);
  std::vector<SampleResult> out(kRows);
  for (int round = 0; round < kRounds; ++round) {
    for (int r = 0; r < kRows; ++r) {
      requests[r].row = r;
      requests[r].config.seed = 5;
      requests[r].config.index = static_cast<std::uint64_t>(round * kRows + r);
    }
    ASSERT_TRUE((*sampler)->sample(logits, requests, nullptr, out).ok());
    for (const SampleResult& s : out) ++hist[s.token];
  }
  const double n = kRows * kRounds;
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(hist[i] / n, 0.1 * (i + 1), 0.025) << "token " << i;
}

// Structured output: a token bitmask per row (random sparse, a single
// allowed id, a mask that forbids the row's argmax and a +100-biased id, or
// none) gives the CPU reference's token, logprobs and top-N, and the token
// is always one the mask allows.
TEST(GpuSampler, TokenBitmaskMatchesCpuReference) {
  VPOD_REQUIRE_GPU();
  constexpr int kRows = 24;
  for (int vocab : {1000, 128256}) {  // 1000: the last mask word is partial
    auto sampler = GpuSampler::create(kRows, vocab);
    ASSERT_TRUE(sampler.ok()) << sampler.status().to_string();
    const int words = (vocab + 31) / 32;
    for (const Config& cfg : configs()) {
      std::vector<float> rows;
      std::vector<std::vector<float>> originals;
      std::vector<std::vector<std::uint32_t>> masks(kRows);
      std::vector<std::vector<LogitBias>> biases(kRows);
      std::vector<SampleRequest> requests;
      std::mt19937 rng(static_cast<std::uint32_t>(vocab));
      for (int s = 0; s < kRows; ++s) {
        originals.push_back(make_logits(vocab, Shape::normal, 500u + static_cast<unsigned>(s)));
        const std::vector<float>& row = originals.back();
        rows.insert(rows.end(), row.begin(), row.end());
        const auto argmax =
            static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        std::vector<std::uint32_t>& m = masks[static_cast<std::size_t>(s)];
        m.assign(static_cast<std::size_t>(words), 0u);
        auto allow = [&](int id) { m[static_cast<std::size_t>(id / 32)] |= 1u << (id % 32); };
        switch (s % 4) {
          case 0:
            for (int id = 0; id < vocab; ++id)
              if (rng() % 10 < 3) allow(id);
            break;
          case 1: allow(static_cast<int>(rng() % static_cast<unsigned>(vocab))); break;
          case 2:
            for (int id = 0; id < vocab; ++id)
              if (id != argmax && id != 7) allow(id);
            biases[static_cast<std::size_t>(s)] = {{7, 100.0f}, {argmax, 50.0f}};
            break;
          case 3: m.clear(); break;  // unconstrained row in a constrained batch
        }
        SampleRequest r;
        r.row = s;
        r.config = cfg.c;
        r.config.seed = 91u + static_cast<std::uint64_t>(s);
        r.config.index = static_cast<std::uint64_t>(s);
        r.allowed_tokens = m;
        r.logit_bias = biases[static_cast<std::size_t>(s)];
        requests.push_back(r);
      }
      auto dev = cuda::DeviceBuffer::allocate(rows.size() * sizeof(float));
      ASSERT_TRUE(dev.ok());
      dev->copy_from_host(rows.data(), rows.size() * sizeof(float));
      const TensorView logits(dev->data(), DType::f32, {kRows, vocab}, Device::cuda);
      std::vector<SampleResult> got(kRows, SampleResult{-7, NAN, {}});
      const Status st = (*sampler)->sample(logits, requests, nullptr, got);
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (int s = 0; s < kRows; ++s) {
        const SampleRequest& r = requests[static_cast<std::size_t>(s)];
        const SampleResult want = sample_ref(originals[static_cast<std::size_t>(s)], r.config, {},
                                             {}, {}, r.logit_bias, r.allowed_tokens);
        const std::string where =
            cfg.name + " vocab " + std::to_string(vocab) + " row " + std::to_string(s);
        EXPECT_EQ(got[s].token, want.token) << where;
        EXPECT_TRUE(token_allowed(r.allowed_tokens, got[s].token)) << where;
        EXPECT_NEAR(got[s].logprob, want.logprob, 1e-4f + 1e-5f * std::fabs(want.logprob)) << where;
        ASSERT_EQ(got[s].top.size(), want.top.size()) << where;
        for (std::size_t t = 0; t < want.top.size(); ++t) {
          // Past the allowed ids the top-N are -inf, lowest id first on both sides.
          EXPECT_EQ(got[s].top[t].token, want.top[t].token) << where << " top " << t;
          if (std::isinf(want.top[t].logprob))
            EXPECT_EQ(got[s].top[t].logprob, want.top[t].logprob) << where << " top " << t;
          else
            EXPECT_NEAR(got[s].top[t].logprob, want.top[t].logprob, 1e-4f) << where << " top " << t;
        }
      }
    }
  }
}

TEST(GpuSampler, RejectsBadRequests) {
  VPOD_REQUIRE_GPU();
  auto sampler = GpuSampler::create(2, 16);
  ASSERT_TRUE(sampler.ok());
  auto dev = cuda::DeviceBuffer::allocate(4 * 16 * sizeof(float));
  ASSERT_TRUE(dev.ok());
  const TensorView logits(dev->data(), DType::f32, {4, 16}, Device::cuda);
  std::vector<SampleRequest> three(3);
  std::vector<SampleResult> out(3);
  EXPECT_FALSE((*sampler)->sample(logits, three, nullptr, out).ok());  // more rows than created for
  std::vector<SampleRequest> one(1);
  std::vector<SampleResult> out1(1);
  one[0].row = 4;
  EXPECT_FALSE((*sampler)->sample(logits, one, nullptr, out1).ok());  // row outside the matrix
  one[0].row = 0;
  one[0].config.num_top_logprobs = kMaxGpuTopLogprobs + 1;
  EXPECT_FALSE((*sampler)->sample(logits, one, nullptr, out1).ok());
}

}  // namespace
}  // namespace vpod::kernels
