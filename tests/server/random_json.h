// Random request bodies for the parsers' fuzz tests (request_parse_test,
// responses_test): JSON values built from a vocabulary of the API's keys
// (so objects often look like real requests), then byte-level mutations of
// their text (flips, cuts, stray JSON punctuation).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace vpod::server::testing {

class RandomJson {
 public:
  RandomJson(std::uint64_t seed, std::vector<std::string> keys)
      : rng_(seed), keys_(std::move(keys)) {}

  std::mt19937_64& rng() { return rng_; }
  const std::string& key() { return keys_[rng_() % keys_.size()]; }

  // null, a bool, an int in [-1000, 3000), a double in [-5, 5), a short
  // UTF-8 string, a key, a 64-bit unsigned; below depth 4 also arrays and
  // objects of up to 3 / 4 random values.
  nlohmann::json value(int depth = 1) {
    switch (rng_() % (depth > 3 ? 7 : 9)) {
      case 0: return nullptr;
      case 1: return (rng_() % 2) == 0;
      case 2: return static_cast<std::int64_t>(rng_() % 4000) - 1000;
      case 3: return std::uniform_real_distribution<double>(-5, 5)(rng_);
      case 4: {
        static const char* pieces[] = {"a", "b", "\xc3\xa9", " ", "\xf0\x9f\x98\x80"};
        std::string s;
        for (int i = 0, k = static_cast<int>(rng_() % 4); i < k; ++i) s += pieces[rng_() % 5];
        return s;
      }
      case 5: return key();
      case 6: return static_cast<std::uint64_t>(rng_());
      case 7: {
        nlohmann::json a = nlohmann::json::array();
        for (int i = 0, k = static_cast<int>(rng_() % 4); i < k; ++i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (int i = 0, k = static_cast<int>(rng_() % 5); i < k; ++i) o[key()] = value(depth + 1);
        return o;
      }
    }
  }

  // Up to two byte-level mutations of `text`.
  std::string mutate(std::string text) {
    for (int m = 0, k = static_cast<int>(rng_() % 3); m < k && !text.empty(); ++m) {
      const std::size_t pos = rng_() % text.size();
      switch (rng_() % 3) {
        case 0: text[pos] = static_cast<char>(rng_() % 256); break;
        case 1: text.resize(pos); break;
        default: text.insert(pos, 1, "{}[],:\"\\"[rng_() % 8]); break;
      }
    }
    return text;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<std::string> keys_;
};

}  // namespace vpod::server::testing
