#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "common/check.h"
#include "kernels/sampling/sampling.h"

namespace vpod::kernels {

namespace {

std::uint64_t mix(std::uint64_t x) {
  std::uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

float sampling_uniform(std::uint64_t seed, std::uint64_t index, std::int32_t id) {
  const std::uint64_t key = mix(seed ^ mix(index));
  const std::uint64_t bits = mix(key + static_cast<std::uint64_t>(static_cast<std::uint32_t>(id)));
  return (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

SampleResult sample_ref(std::span<const float> logits, const SamplingConfig& c,
                        std::span<const std::int32_t> prompt_ids,
                        std::span<const std::int32_t> output_ids,
                        std::span<const std::int32_t> suppressed_ids) {
  const int vocab = static_cast<int>(logits.size());
  VPOD_CHECK(vocab > 0);
  std::vector<float> l(logits.begin(), logits.end());
  for (std::int32_t id : suppressed_ids) {
    if (id >= 0 && id < vocab) l[id] = -INFINITY;
  }
  if (c.repetition_penalty != 1.0f) {
    std::vector<bool> seen(vocab, false);
    for (auto ids : {prompt_ids, output_ids}) {
      for (std::int32_t id : ids) {
        if (id < 0 || id >= vocab || seen[id]) continue;
        seen[id] = true;
        l[id] = l[id] > 0 ? l[id] / c.repetition_penalty : l[id] * c.repetition_penalty;
      }
    }
  }
  if (c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f) {
    std::unordered_map<std::int32_t, int> counts;
    for (std::int32_t id : output_ids) {
      if (id >= 0 && id < vocab) ++counts[id];
    }
    for (const auto& [id, n] : counts) {
      l[id] -= c.presence_penalty + c.frequency_penalty * static_cast<float>(n);
    }
  }

  // Logprobs of the processed logits.
  const float max_l = *std::max_element(l.begin(), l.end());
  double sum = 0.0;
  for (float v : l) sum += std::exp(static_cast<double>(v - max_l));
  const float log_z = max_l + static_cast<float>(std::log(sum));
  SampleResult r;
  if (c.num_top_logprobs > 0) {
    const int n = std::min(c.num_top_logprobs, vocab);
    std::vector<std::int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int a, int b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
    for (int i = 0; i < n; ++i) r.top.push_back({order[i], l[order[i]] - log_z});
  }

  if (c.temperature <= 0.0f) {
    r.token = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    r.logprob = l[r.token] - log_z;
    return r;
  }

  std::vector<float> s(vocab);
  for (int i = 0; i < vocab; ++i) s[i] = l[i] / c.temperature;
  std::vector<bool> keep(vocab, true);
  for (int i = 0; i < vocab; ++i) keep[i] = s[i] != -INFINITY;
  if ((c.top_k > 0 && c.top_k < vocab) || c.top_p < 1.0f || c.min_p > 0.0f) {
    std::vector<std::int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b]; });
    const float s_max = s[order[0]];
    if (c.top_k > 0 && c.top_k < vocab) {
      const float kth = s[order[c.top_k - 1]];
      for (int i = 0; i < vocab; ++i) {
        if (s[i] < kth) keep[i] = false;
      }
    }
    if (c.top_p < 1.0f) {
      // Keep the shortest prefix (by probability) whose mass reaches top_p,
      // over the tokens top-k kept.
      double kept_z = 0.0;
      for (int i = 0; i < vocab; ++i) {
        if (keep[i]) kept_z += std::exp(static_cast<double>(s[i] - s_max));
      }
      double mass = 0.0;
      bool reached = false;
      for (std::int32_t id : order) {
        if (!keep[id]) continue;
        if (reached) {
          keep[id] = false;
          continue;
        }
        mass += std::exp(static_cast<double>(s[id] - s_max)) / kept_z;
        if (mass >= c.top_p) reached = true;
      }
    }
    if (c.min_p > 0.0f) {
      // p_i >= min_p * p_max  <=>  s_i >= s_max + log(min_p)
      const float threshold = s_max + std::log(c.min_p);
      for (int i = 0; i < vocab; ++i) {
        if (s[i] < threshold) keep[i] = false;
      }
    }
  }
  float best = -INFINITY;
  std::int32_t best_id = -1;
  for (int i = 0; i < vocab; ++i) {
    if (!keep[i]) continue;
    const float u = sampling_uniform(c.seed, c.index, i);
    const float g = s[i] - std::log(-std::log(u));
    if (g > best || best_id < 0) {
      best = g;
      best_id = i;
    }
  }
  if (best_id < 0)
    best_id = static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  r.token = best_id;
  r.logprob = l[best_id] - log_z;
  return r;
}

}  // namespace vpod::kernels
