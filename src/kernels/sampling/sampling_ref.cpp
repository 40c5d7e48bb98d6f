// Token sampling on the CPU (sampling.h): sample(), which the CPU backend runs
// into a reusable workspace, sample_ref() for tests, and the seeded noise both
// draw from.

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/splitmix64.h"
#include "kernels/sampling/sampling.h"

namespace vpod::kernels {

namespace {

constexpr std::uint8_t kSeen = 1;  // in the prompt or output (repetition penalty)

}  // namespace

void SamplingWorkspace::reserve(int vocab_size) {
  const auto n = static_cast<std::size_t>(std::max(vocab_size, 0));
  if (logits.size() >= n) return;
  logits.resize(n);
  scaled.resize(n);
  order.resize(n);
  counts.assign(n, 0);
  flags.assign(n, 0);
  touched.reserve(n);
}

double sampling_uniform(std::uint64_t seed, std::uint64_t index, std::int32_t id) {
  const std::uint64_t key = splitmix64(seed ^ splitmix64(index));
  const std::uint64_t bits =
      splitmix64(key + static_cast<std::uint64_t>(static_cast<std::uint32_t>(id)));
  // In double, where it is exact: in float, 2^24 - 1 + 0.5 rounds to 2^24,
  // u to 1 and the Gumbel noise to +inf (a uniformly random token on about
  // vocab / 2^24 of the draws, whatever the logits).
  return (static_cast<double>(bits >> 40) + 0.5) * (1.0 / 16777216.0);
}

float sampling_gumbel(std::uint64_t seed, std::uint64_t index, std::int32_t id) {
  return static_cast<float>(-std::log(-std::log(sampling_uniform(seed, index, id))));
}

void sample(std::span<const float> logits, const SamplingConfig& c,
            std::span<const std::int32_t> prompt_ids, std::span<const std::int32_t> output_ids,
            std::span<const std::int32_t> suppressed_ids, std::span<const LogitBias> logit_bias,
            std::span<const std::uint32_t> allowed_tokens, SamplingWorkspace& ws, SampleResult& r) {
  const int vocab = static_cast<int>(logits.size());
  VPOD_CHECK(vocab > 0);
  ws.reserve(vocab);
  float* l = ws.logits.data();
  std::copy(logits.begin(), logits.end(), l);
  if (!allowed_tokens.empty()) {
    VPOD_CHECK(allowed_tokens.size() * 32 >= static_cast<std::size_t>(vocab));
    for (int i = 0; i < vocab; ++i)
      if (!token_allowed(allowed_tokens, i)) l[i] = -INFINITY;
  }
  for (std::int32_t id : suppressed_ids) {
    if (id >= 0 && id < vocab) l[id] = -INFINITY;
  }
  for (const LogitBias& b : logit_bias) {
    if (b.token >= 0 && b.token < vocab) l[b.token] += b.bias;
  }

  // Penalties. counts/flags are zero on entry and reset through `touched`.
  ws.touched.clear();
  auto touch = [&](std::int32_t id) {
    if (ws.counts[id] == 0 && ws.flags[id] == 0) ws.touched.push_back(id);
  };
  if (c.repetition_penalty != 1.0f) {
    for (auto ids : {prompt_ids, output_ids}) {
      for (std::int32_t id : ids) {
        if (id < 0 || id >= vocab || (ws.flags[id] & kSeen) != 0) continue;
        touch(id);
        ws.flags[id] |= kSeen;
        l[id] = l[id] > 0 ? l[id] / c.repetition_penalty : l[id] * c.repetition_penalty;
      }
    }
  }
  if (c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f) {
    for (std::int32_t id : output_ids) {
      if (id < 0 || id >= vocab) continue;
      touch(id);
      ++ws.counts[id];
    }
    for (std::int32_t id : ws.touched) {
      const int n = ws.counts[id];
      if (n > 0) {
        const float scaled = c.frequency_penalty * static_cast<float>(n);  // not fused: GPU parity
        l[id] -= c.presence_penalty + scaled;
      }
    }
  }
  for (std::int32_t id : ws.touched) {
    ws.counts[id] = 0;
    ws.flags[id] = 0;
  }

  // Logprobs of the processed logits.
  const float max_l = *std::max_element(l, l + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(l[i] - max_l));
  const float log_z = max_l + static_cast<float>(std::log(sum));
  auto by_logit = [&](std::int32_t a, std::int32_t b) {
    return l[a] != l[b] ? l[a] > l[b] : a < b;
  };
  r.top.clear();
  if (c.num_top_logprobs > 0) {
    const int n = std::min(c.num_top_logprobs, vocab);
    std::int32_t* order = ws.order.data();
    for (int i = 0; i < vocab; ++i) order[i] = i;
    std::partial_sort(order, order + n, order + vocab, by_logit);
    for (int i = 0; i < n; ++i) r.top.push_back({order[i], l[order[i]] - log_z});
  }

  if (c.temperature <= 0.0f) {
    r.token = static_cast<std::int32_t>(std::max_element(l, l + vocab) - l);
    r.logprob = l[r.token] - log_z;
    return;
  }

  float* s = ws.scaled.data();
  for (int i = 0; i < vocab; ++i) s[i] = l[i] / c.temperature;
  // Candidates, most likely first where an order is needed. Ties keep the
  // lower id first, so the result does not depend on the sort algorithm.
  std::int32_t* order = ws.order.data();
  int num = 0;
  for (int i = 0; i < vocab; ++i) {
    if (s[i] != -INFINITY) order[num++] = i;
  }
  auto by_scaled = [&](std::int32_t a, std::int32_t b) {
    return s[a] != s[b] ? s[a] > s[b] : a < b;
  };
  const bool top_k = c.top_k > 0 && c.top_k < num;
  if (top_k || c.top_p < 1.0f || c.min_p > 0.0f) {
    if (top_k) {
      // The k largest, plus every id tied with the k-th value.
      std::nth_element(order, order + (c.top_k - 1), order + num, by_scaled);
      const float kth = s[order[c.top_k - 1]];
      int kept = 0;
      for (int i = 0; i < num; ++i) {
        if (s[order[i]] >= kth) order[kept++] = order[i];
      }
      num = kept;
    }
    if (c.top_p < 1.0f) {
      std::sort(order, order + num, by_scaled);
      const float s_max = s[order[0]];
      double kept_z = 0.0;
      for (int i = 0; i < num; ++i) kept_z += std::exp(static_cast<double>(s[order[i]] - s_max));
      double mass = 0.0;
      int kept = num;
      for (int i = 0; i < num; ++i) {
        mass += std::exp(static_cast<double>(s[order[i]] - s_max)) / kept_z;
        if (mass >= c.top_p) {
          kept = i + 1;
          break;
        }
      }
      num = kept;
    }
    if (c.min_p > 0.0f && num > 0) {
      // p_i >= min_p * p_max  <=>  s_i >= s_max + log(min_p)
      float s_max = -INFINITY;
      for (int i = 0; i < num; ++i) s_max = std::max(s_max, s[order[i]]);
      const float threshold = s_max + static_cast<float>(std::log(static_cast<double>(c.min_p)));
      int kept = 0;
      for (int i = 0; i < num; ++i) {
        if (s[order[i]] >= threshold) order[kept++] = order[i];
      }
      num = kept;
    }
  }
  float best = -INFINITY;
  std::int32_t best_id = -1;
  for (int i = 0; i < num; ++i) {
    const std::int32_t id = order[i];
    const float g = s[id] + sampling_gumbel(c.seed, c.index, id);
    if (best_id < 0 || g > best || (g == best && id < best_id)) {
      best = g;
      best_id = id;
    }
  }
  if (best_id < 0) best_id = static_cast<std::int32_t>(std::max_element(l, l + vocab) - l);
  r.token = best_id;
  r.logprob = l[best_id] - log_z;
}

SampleResult sample_ref(std::span<const float> logits, const SamplingConfig& config,
                        std::span<const std::int32_t> prompt_ids,
                        std::span<const std::int32_t> output_ids,
                        std::span<const std::int32_t> suppressed_ids,
                        std::span<const LogitBias> logit_bias,
                        std::span<const std::uint32_t> allowed_tokens) {
  SamplingWorkspace ws(static_cast<int>(logits.size()));
  SampleResult r;
  sample(logits, config, prompt_ids, output_ids, suppressed_ids, logit_bias, allowed_tokens, ws, r);
  return r;
}

}  // namespace vpod::kernels
