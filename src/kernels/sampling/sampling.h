// Token sampling from one row of logits: penalties, temperature, top-k,
// top-p, min-p, then an exact draw by the Gumbel-max trick with a
// counter-based RNG, so a request's k-th token depends only on (seed, k) and
// its logits: reproducible across batch composition and preemption.
//
// Order (vLLM's): ids a structured-output bitmask disallows -> -inf (before
// everything else); suppressed ids -> -inf; logit bias (l += bias, OpenAI's
// logit_bias, before the penalties as in vLLM v1); repetition penalty over
// prompt and output ids (l > 0 ? l / r : l * r); presence/frequency penalties over
// output ids (l -= presence * [count > 0] + frequency * count); logprobs are
// log_softmax of these processed logits (before temperature); greedy
// (temperature 0) takes the argmax (lowest id on ties); otherwise l /= T,
// top-k keeps the k largest (ties at the k-th value kept), top-p keeps the
// most likely tokens until their probability mass reaches p, min-p drops
// tokens whose probability is below min_p * p_max, and the token is
// argmax(l_i + g_i) over the kept ids with g_i = -log(-log(u_i)),
//   u_i = ((splitmix64(splitmix64(seed ^ splitmix64(index)) + id) >> 40) + 0.5) * 2^-24.
// u_i, g_i and log(min_p) are computed in double (g_i and log(min_p) then
// rounded to float), and the float arithmetic is written without
// contractible a + b * c, so the GPU sampler (sampling_gpu.h) reproduces the
// draws bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace vpod::kernels {

struct SamplingConfig {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::uint64_t seed = 0;
  std::uint64_t index = 0;   // which output token of the request this is
  int num_top_logprobs = 0;  // top-N logprobs to return
};

// One entry of a request's logit bias (OpenAI's logit_bias): added to the
// token's logit before penalties, logprobs and the draw.
struct LogitBias {
  std::int32_t token = 0;
  float bias = 0.0f;  // [-100, 100]
};

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  std::int32_t token = 0;
  float logprob = 0.0f;           // of `token`, from the processed logits
  std::vector<TokenLogprob> top;  // most likely first, num_top_logprobs entries
};

// Scratch buffers of sample(), sized once for a vocabulary: the step loop
// samples without allocating (SampleResult::top is reserved too).
struct SamplingWorkspace {
  explicit SamplingWorkspace(int vocab_size = 0) { reserve(vocab_size); }
  void reserve(int vocab_size);
  std::vector<float> logits;          // processed logits
  std::vector<float> scaled;          // / temperature
  std::vector<std::int32_t> order;    // candidate ids
  std::vector<std::int32_t> counts;   // output-token counts (penalties), zero between calls
  std::vector<std::uint8_t> flags;    // seen-in-history marks / kept marks
  std::vector<std::int32_t> touched;  // ids whose counts/flags are set
};

// The uniform in (0, 1) of (seed, index, id) described above (exact in double).
double sampling_uniform(std::uint64_t seed, std::uint64_t index, std::int32_t id);
// g = -log(-log(u)) of that uniform, in double, rounded to float.
float sampling_gumbel(std::uint64_t seed, std::uint64_t index, std::int32_t id);

// One row of a logits matrix to sample, with the ids its penalties read
// (spans stay valid for the call).
struct SampleRequest {
  int row = 0;  // row of the logits matrix
  SamplingConfig config;
  std::span<const std::int32_t> prompt_ids;
  std::span<const std::int32_t> output_ids;
  std::span<const std::int32_t> suppressed_ids;
  std::span<const LogitBias> logit_bias;  // ids unique; out-of-vocab entries ignored
  // Structured output: bit (id % 32) of word (id / 32) set = id may be sampled
  // (token_bitmask_words(vocab) words, xgrammar's layout); empty = all may.
  std::span<const std::uint32_t> allowed_tokens;
};

// Whether `allowed` (a token bitmask as in SampleRequest; empty = all) lets `id` through.
inline bool token_allowed(std::span<const std::uint32_t> allowed, std::int32_t id) {
  return allowed.empty() || ((allowed[static_cast<std::size_t>(id) >> 5] >> (id & 31)) & 1u) != 0;
}

// Samples into `out` using `ws` (no allocation once both are sized).
void sample(std::span<const float> logits, const SamplingConfig& config,
            std::span<const std::int32_t> prompt_ids, std::span<const std::int32_t> output_ids,
            std::span<const std::int32_t> suppressed_ids, std::span<const LogitBias> logit_bias,
            std::span<const std::uint32_t> allowed_tokens, SamplingWorkspace& ws,
            SampleResult& out);

// CPU reference (allocates its own workspace). `prompt_ids` and `output_ids`
// feed the penalties; `suppressed_ids` are never sampled; `logit_bias` is
// added to its tokens' logits; ids `allowed_tokens` (a bitmask) disallows are never sampled.
SampleResult sample_ref(std::span<const float> logits, const SamplingConfig& config,
                        std::span<const std::int32_t> prompt_ids,
                        std::span<const std::int32_t> output_ids,
                        std::span<const std::int32_t> suppressed_ids = {},
                        std::span<const LogitBias> logit_bias = {},
                        std::span<const std::uint32_t> allowed_tokens = {});

}  // namespace vpod::kernels
