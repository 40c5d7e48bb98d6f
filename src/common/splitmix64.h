// SplitMix64 (Vigna), the one integer hash vpod spreads seeds with: the
// random-weight models (make-model), request seeds (engine, server's n > 1
// choices) and the samplers' counter-based Gumbel noise, on the host and in
// CUDA kernels alike. A bijection on 64-bit integers; nearby inputs land far
// apart.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define VPOD_HOST_DEVICE __host__ __device__
#else
#define VPOD_HOST_DEVICE
#endif

namespace vpod {

// The golden-ratio increment SplitMix64 steps its state by.
inline constexpr std::uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

// The output function alone: z -> mixed z.
VPOD_HOST_DEVICE constexpr std::uint64_t splitmix64_finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One step of the generator from state x: finalize(x + gamma).
VPOD_HOST_DEVICE constexpr std::uint64_t splitmix64(std::uint64_t x) {
  return splitmix64_finalize(x + kSplitMix64Gamma);
}

// A byte string hashed through SplitMix64, 8 bytes at a time, then its
// length: names a request's cache salt or a model's config (prefix caching).
// Not cryptographic; host only.
inline std::uint64_t splitmix64_bytes(std::string_view bytes, std::uint64_t seed = 0) {
  std::uint64_t h = splitmix64(seed);
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, 8);
    h = splitmix64(h ^ word);
  }
  if (i < bytes.size()) {
    std::uint64_t tail = 0;
    std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    h = splitmix64(h ^ tail);
  }
  return splitmix64(h ^ static_cast<std::uint64_t>(bytes.size()));
}

}  // namespace vpod
