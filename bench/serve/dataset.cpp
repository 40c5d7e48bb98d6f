// Request lengths and prompts (dataset.h): fixed, random-range and trace
// lengths, and prompts of an exact token count.
#include "bench/serve/dataset.h"

#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "common/check.h"

namespace vpod::bench::serve {
namespace {

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// Inverse of normal_cdf by bisection: exact to double precision, and only
// used to fit and to state quantiles (sampling uses rejection).
double normal_quantile(double q) {
  VPOD_CHECK(q > 0.0 && q < 1.0);
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (normal_cdf(mid) < q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// One draw of the truncated log-normal, rounded to a token count >= 1.
int sample_truncated(const TruncatedLogNormal& d, std::normal_distribution<double>& normal,
                     std::mt19937_64& rng) {
  const double log_upper = std::log(d.upper);
  for (;;) {
    const double x = d.mu + d.sigma * normal(rng);
    if (x <= log_upper) return std::max(1, static_cast<int>(std::lround(std::exp(x))));
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t end = line.find(sep, pos);
    out.push_back(trim(line.substr(pos, end == std::string_view::npos ? end : end - pos)));
    if (end == std::string_view::npos) return out;
    pos = end + 1;
  }
}

// Integers as written by Python (also "123.0", which pandas writes for floats).
std::optional<long long> parse_count(std::string_view s) {
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || value != std::floor(value)) {
    return std::nullopt;
  }
  return static_cast<long long>(value);
}

}  // namespace

Status validate(const RandomLengths& spec) {
  if (spec.input_len < 1) return invalid_argument("input length must be >= 1");
  if (spec.output_len < 1) return invalid_argument("output length must be >= 1");
  if (!(spec.range_ratio >= 0.0 && spec.range_ratio < 1.0)) {
    return invalid_argument(fmt::format("range ratio {} is not in [0, 1)", spec.range_ratio));
  }
  return {};
}

std::vector<RequestLengths> sample_random_lengths(int num_requests, const RandomLengths& spec,
                                                  std::uint64_t seed) {
  VPOD_CHECK(validate(spec).ok());
  const auto bounds = [&](int len) {
    const int lo = std::max(1, static_cast<int>(std::floor(len * (1.0 - spec.range_ratio))));
    const int hi = static_cast<int>(std::ceil(len * (1.0 + spec.range_ratio)));
    return std::uniform_int_distribution<int>(lo, std::max(lo, hi));
  };
  auto input = bounds(spec.input_len);
  auto output = bounds(spec.output_len);
  std::mt19937_64 rng(seed);
  std::vector<RequestLengths> out(num_requests);
  for (RequestLengths& r : out) {
    r.input_len = input(rng);
    r.output_len = output(rng);
  }
  return out;
}

double TruncatedLogNormal::quantile(double q) const {
  const double mass = normal_cdf((std::log(upper) - mu) / sigma);
  return std::exp(mu + sigma * normal_quantile(q * mass));
}

Result<TruncatedLogNormal> fit_truncated_lognormal(double median, double p90, double upper) {
  if (!(median > 0.0 && p90 > median && upper > p90)) {
    return invalid_argument(fmt::format(
        "cannot fit a truncated log-normal to median {} and P90 {} below {}", median, p90, upper));
  }
  // Fixed point: with the mass kept by the truncation, c = Phi((ln U - mu) /
  // sigma), the q-quantile is exp(mu + sigma * Phi^-1(q * c)); solve the two
  // quantile equations for (mu, sigma) at the current c, recompute c, repeat.
  TruncatedLogNormal d;
  d.upper = upper;
  double mass = 1.0;
  for (int iter = 0; iter < 500; ++iter) {
    const double z50 = normal_quantile(0.5 * mass);
    const double z90 = normal_quantile(0.9 * mass);
    d.sigma = (std::log(p90) - std::log(median)) / (z90 - z50);
    d.mu = std::log(median) - d.sigma * z50;
    const double next = normal_cdf((std::log(upper) - d.mu) / d.sigma);
    if (std::abs(next - mass) < 1e-13) {
      if (std::abs(d.median() / median - 1.0) < 1e-6 &&
          std::abs(d.quantile(0.9) / p90 - 1.0) < 1e-6) {
        return d;
      }
      break;
    }
    mass = next;
  }
  return invalid_argument(
      fmt::format("no truncated log-normal below {} has median {} and P90 {}", upper, median, p90));
}

Status validate(const ArxivLengths& spec) {
  const int min_total = static_cast<int>(kArxivPromptP90) + kArxivMaxOutput + 1;
  if (spec.max_total < min_total) {
    return invalid_argument(fmt::format(
        "the arXiv-like trace needs a max total length of at least {} tokens (its prompt P90 is "
        "{} and outputs go up to {}), got {}",
        min_total, kArxivPromptP90, kArxivMaxOutput, spec.max_total));
  }
  return {};
}

std::vector<RequestLengths> sample_arxiv_lengths(int num_requests, const ArxivLengths& spec,
                                                 std::uint64_t seed) {
  VPOD_CHECK(validate(spec).ok());
  const auto prompt = fit_truncated_lognormal(kArxivPromptMedian, kArxivPromptP90,
                                              spec.max_total - kArxivMaxOutput);
  const auto output = fit_truncated_lognormal(kArxivOutputMedian, kArxivOutputP90, kArxivMaxOutput);
  VPOD_CHECK_MSG(prompt.ok() && output.ok(), "arXiv-like fit failed");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<RequestLengths> out(num_requests);
  for (RequestLengths& r : out) {
    r.input_len = sample_truncated(*prompt, normal, rng);
    r.output_len = sample_truncated(*output, normal, rng);
  }
  return out;
}

int output_len_for_pd_ratio(int input_len, double pd_ratio) {
  VPOD_CHECK(input_len >= 1 && pd_ratio > 0.0);
  return std::max(1, static_cast<int>(std::lround(input_len / pd_ratio)));
}

Result<std::vector<RequestLengths>> parse_trace_csv(std::string_view text) {
  std::vector<RequestLengths> out;
  int input_col = -1, output_col = -1;
  std::size_t num_cols = 0;
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    const std::vector<std::string_view> cells = split(line, ',');
    if (input_col < 0) {  // the header
      for (std::size_t i = 0; i < cells.size(); ++i) {
        if (cells[i] == "num_prefill_tokens" || cells[i] == "input_len") input_col = i;
        if (cells[i] == "num_decode_tokens" || cells[i] == "output_len") output_col = i;
      }
      if (input_col < 0 || output_col < 0) {
        return invalid_argument(
            fmt::format("trace header '{}' lacks num_prefill_tokens,num_decode_tokens (or "
                        "input_len,output_len)",
                        line));
      }
      num_cols = cells.size();
      continue;
    }
    if (cells.size() != num_cols) {
      return invalid_argument(fmt::format("trace line {}: {} cells, the header has {}", line_no,
                                          cells.size(), num_cols));
    }
    const auto input = parse_count(cells[input_col]);
    const auto output = parse_count(cells[output_col]);
    if (!input || !output || *input < 1 || *output < 1 || *input > (1 << 30) ||
        *output > (1 << 30)) {
      return invalid_argument(
          fmt::format("trace line {}: lengths '{}' and '{}' are not positive integers", line_no,
                      cells[input_col], cells[output_col]));
    }
    out.push_back({static_cast<int>(*input), static_cast<int>(*output)});
  }
  if (input_col < 0) return invalid_argument("trace is empty (no header)");
  if (out.empty()) return invalid_argument("trace has a header but no requests");
  return out;
}

std::vector<std::int32_t> make_prompt_ids(std::span<const std::int32_t> pool, int length,
                                          std::mt19937_64& rng) {
  VPOD_CHECK(!pool.empty() && length >= 0);
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1);
  std::vector<std::int32_t> ids(length);
  for (std::int32_t& id : ids) id = pool[pick(rng)];
  return ids;
}

}  // namespace vpod::bench::serve
