// Reading a server's /metrics (prometheus.h): the text-format parse, the
// histogram means compared with the client's figures, and the prefix cache's
// counters over a run.
#include "bench/serve/prometheus.h"

#include <charconv>
#include <cmath>
#include <string>

namespace vpod::bench::serve {

std::optional<double> prometheus_sample(std::string_view text, std::string_view name) {
  std::optional<double> total;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#' || !line.starts_with(name)) continue;
    std::string_view rest = line.substr(name.size());
    if (!rest.empty() && rest.front() == '{') {  // labels; values may hold '}' inside quotes
      bool quoted = false;
      std::size_t i = 1;
      for (; i < rest.size(); ++i) {
        if (rest[i] == '\\') {
          ++i;
        } else if (rest[i] == '"') {
          quoted = !quoted;
        } else if (rest[i] == '}' && !quoted) {
          break;
        }
      }
      if (i >= rest.size()) continue;
      rest.remove_prefix(i + 1);
    }
    if (rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) continue;  // longer name
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    const std::string value_text(rest.substr(0, rest.find_first_of(" \t\r")));
    double value = 0.0;
    if (value_text == "+Inf") {
      value = INFINITY;
    } else if (value_text == "-Inf") {
      value = -INFINITY;
    } else {
      const auto [ptr, ec] =
          std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
      if (ec != std::errc() || ptr != value_text.data() + value_text.size()) continue;
    }
    total = total.value_or(0.0) + value;
  }
  return total;
}

std::optional<HistogramTotals> prometheus_histogram(std::string_view text,
                                                    std::string_view histogram) {
  const std::string base(histogram);
  const auto sum = prometheus_sample(text, base + "_sum");
  const auto count = prometheus_sample(text, base + "_count");
  if (!sum || !count) return std::nullopt;
  return HistogramTotals{*sum, *count};
}

std::optional<double> mean_between(const HistogramTotals& before, const HistogramTotals& after) {
  const double count = after.count - before.count;
  if (!(count > 0.0)) return std::nullopt;
  return (after.sum - before.sum) / count;
}

std::optional<PrefixCacheDelta> prefix_cache_between(std::string_view before,
                                                     std::string_view after) {
  for (const char* prefix : {"vpod_", "vllm:"}) {
    const std::string queries = std::string(prefix) + "prefix_cache_queries_total";
    const std::string hits = std::string(prefix) + "prefix_cache_hits_total";
    const auto q0 = prometheus_sample(before, queries), q1 = prometheus_sample(after, queries);
    const auto h0 = prometheus_sample(before, hits), h1 = prometheus_sample(after, hits);
    if (q0 && q1 && h0 && h1) return PrefixCacheDelta{prefix, *q1 - *q0, *h1 - *h0};
  }
  return std::nullopt;
}

}  // namespace vpod::bench::serve
