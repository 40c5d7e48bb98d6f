// Request lengths for the serving and offline benchmarks, and the prompts
// built from them. A request is (input tokens, output tokens); output lengths
// are enforced with ignore_eos + max_tokens, so a dataset is fully described
// by its lengths. Sources:
//
// - random: as vLLM's RandomDataset, lengths uniform over the integers in
//   [floor(L * (1 - r)), ceil(L * (1 + r))] for a range ratio r in [0, 1);
// - fixed: every request the same (random with r = 0);
// - arxiv: the length distribution of the arXiv-summarization trace used by
//   Sarathi-Serve and POD-Attention (see bench/datasets/README.md for the
//   source numbers and the fit);
// - a CSV trace with one request per line (Sarathi-Serve/Vidur's
//   num_prefill_tokens,num_decode_tokens columns, or input_len,output_len).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace vpod::bench::serve {

struct RequestLengths {
  int input_len = 0;
  int output_len = 0;
};

struct RandomLengths {
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;  // [0, 1)
};

Status validate(const RandomLengths& spec);
std::vector<RequestLengths> sample_random_lengths(int num_requests, const RandomLengths& spec,
                                                  std::uint64_t seed);

// A log-normal truncated to (0, upper]: ln X ~ N(mu, sigma) conditioned on X <= upper.
struct TruncatedLogNormal {
  double mu = 0.0;
  double sigma = 1.0;
  double upper = 0.0;
  double quantile(double q) const;  // q in (0, 1)
  double median() const { return quantile(0.5); }
};

// The truncated log-normal on (0, upper] whose median and 90th percentile are
// the given ones (solved by fixed-point iteration; converges when p90 is well
// below `upper`).
Result<TruncatedLogNormal> fit_truncated_lognormal(double median, double p90, double upper);

// The papers' arXiv-summarization trace (Sarathi-Serve, OSDI'24, Table 3;
// tokenized with the Llama-2 tokenizer): prompt tokens median 7059 and P90
// 12985; output tokens median 208 and P90 371.
inline constexpr double kArxivPromptMedian = 7059.0;
inline constexpr double kArxivPromptP90 = 12985.0;
inline constexpr double kArxivOutputMedian = 208.0;
inline constexpr double kArxivOutputP90 = 371.0;
// Outputs are capped here (log-normal mass above it: ~2e-4).
inline constexpr int kArxivMaxOutput = 1024;

struct ArxivLengths {
  // Longest prompt + output, as the papers' filtered trace (16K context).
  // Prompts are capped at max_total - kArxivMaxOutput so every request fits.
  int max_total = 16384;
};

Status validate(const ArxivLengths& spec);
std::vector<RequestLengths> sample_arxiv_lengths(int num_requests, const ArxivLengths& spec,
                                                 std::uint64_t seed);

// Output tokens for a prompt of `input_len` tokens at a prefill-to-decode
// ratio (prompt tokens / output tokens, as the papers define it), at least 1.
int output_len_for_pd_ratio(int input_len, double pd_ratio);

// A CSV trace: a header naming the columns (num_prefill_tokens and
// num_decode_tokens, or input_len and output_len; others are ignored), then
// one request per line.
Result<std::vector<RequestLengths>> parse_trace_csv(std::string_view text);

// Text the served tokenizer encodes to give token ids of its vocabulary:
// prompts are drawn from these ids, so they are valid for any tokenizer and
// their length is exact (they are sent as ids, not re-tokenized text).
inline constexpr const char* kVocabularySampleText =
    "Large language model inference proceeds in two phases. The prefill phase reads the whole "
    "prompt at once and is limited by arithmetic throughput; the decode phase produces one token "
    "per step and is limited by memory bandwidth, because every step reads the weights and the "
    "key-value cache of each running request. Serving systems therefore batch many requests, "
    "split long prompts into chunks, and mix chunks with decodes in hybrid batches. Summaries of "
    "scientific articles make long prompts with short answers: the abstract of a paper about "
    "galaxies, proteins, graphs, turbulence or number theory is a few hundred words, while the "
    "article itself holds thousands. 0123456789 +-*/=<>()[]{} #$%&@!? \"quoted\" 'text', and "
    "symbols; Émile, naïve café, Zürich, 東京, München.";

// A prompt of exactly `length` token ids drawn uniformly from `pool` (ids the
// served tokenizer produced, hence valid for its vocabulary).
std::vector<std::int32_t> make_prompt_ids(std::span<const std::int32_t> pool, int length,
                                          std::mt19937_64& rng);

}  // namespace vpod::bench::serve
