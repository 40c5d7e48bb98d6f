// The KvStore vocabulary (kv_store.h): KvShape's validation and the parser of
// memory sizes (--kv-cache-memory).

#include "kvcache/kv_store.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

namespace vpod::kvcache {

Status KvShape::validate() const {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0) {
    return invalid_argument(
        fmt::format("KV shape needs positive layers/heads/head_dim, got {}/{}/{}", num_layers,
                    num_kv_heads, head_dim));
  }
  return {};
}

Result<std::size_t> parse_memory_size(std::string_view text) {
  const std::string original(text);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  std::size_t number_end = 0;
  while (number_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[number_end])) || text[number_end] == '.')) {
    ++number_end;
  }
  double value = 0.0;
  const std::string_view number = text.substr(0, number_end);
  const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size()) {
    return invalid_argument(
        fmt::format("'{}' is not a memory size (e.g. 96GiB, 512MiB)", original));
  }
  std::string_view suffix = text.substr(number_end);
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  static constexpr std::array<std::pair<std::string_view, double>, 13> kUnits = {{
      {"", 1.0},
      {"B", 1.0},
      {"K", 1024.0},
      {"KiB", 1024.0},
      {"KB", 1e3},
      {"M", 1024.0 * 1024},
      {"MiB", 1024.0 * 1024},
      {"MB", 1e6},
      {"G", 1024.0 * 1024 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"GB", 1e9},
      {"TiB", 1024.0 * 1024 * 1024 * 1024},
      {"TB", 1e12},
  }};
  for (const auto& [name, scale] : kUnits) {
    if (suffix == name) {
      const double bytes = std::floor(value * scale);
      if (!(bytes >= 0.0) || bytes > 9.0e18) {
        return invalid_argument(fmt::format("memory size '{}' is out of range", original));
      }
      return static_cast<std::size_t>(bytes);
    }
  }
  return invalid_argument(fmt::format(
      "'{}': unknown unit '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", original, suffix));
}

}  // namespace vpod::kvcache
