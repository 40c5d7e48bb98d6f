// Sampling on the GPU (sampling_gpu.h): the one-CTA-per-row sampling kernel and
// GpuSampler, which owns its buffers and launches it.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>

#include "common/check.h"
#include "common/cuda_check.h"
#include "common/splitmix64.h"
#include "cuda/pinned_buffer.h"
#include "kernels/sampling/sampling_gpu.h"

namespace vpod::kernels {

namespace {

// ---------------------------------------------------------------------------
// Parameters (host-built, one upload per call).
// ---------------------------------------------------------------------------
constexpr std::int32_t kSeen = 1;        // in prompt or output: repetition penalty
constexpr std::int32_t kSuppressed = 2;  // never sampled

// One token id the penalties, suppression or logit bias touch (unique per row).
struct PenaltyEntry {
  std::int32_t id;
  std::int32_t count;  // occurrences in the output (presence/frequency), 0 if off
  std::int32_t flags;  // kSeen | kSuppressed
  float bias;          // logit_bias of the id, 0 if none
};

struct RowParams {
  float* logits;                 // [vocab] of this request's row
  const std::uint32_t* allowed;  // [ceil(vocab / 32)] token bitmask, or null: all allowed
  float temperature, top_p, min_p;
  float repetition_penalty, presence_penalty, frequency_penalty;
  std::int32_t top_k, num_top;
  std::uint64_t seed, index;
  std::int32_t entries_begin, num_entries;
};

struct RowResult {
  std::int32_t token;
  float logprob;
  std::int32_t top_ids[kMaxGpuTopLogprobs];
  float top_logprobs[kMaxGpuTopLogprobs];
};

struct SampleParams {
  const RowParams* rows;        // [num_rows]
  const PenaltyEntry* entries;  // rows' entries, concatenated
  RowResult* results;           // [num_rows]
  std::int32_t vocab;
};

// ---------------------------------------------------------------------------
// Device helpers.
// ---------------------------------------------------------------------------
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMassDigits = 16;  // top-p descends 4 bits of the key per pass

// sampling_gumbel() of sampling_ref.cpp.
__device__ __forceinline__ float gumbel(std::uint64_t key, std::int32_t id) {
  const std::uint64_t bits =
      splitmix64(key + static_cast<std::uint64_t>(static_cast<std::uint32_t>(id)));
  // In double, where it is exact (in float the largest value rounds to 1).
  const double u = __dmul_rn(__dadd_rn(static_cast<double>(bits >> 40), 0.5), 1.0 / 16777216.0);
  return static_cast<float>(-log(-log(u)));
}

// Order-preserving map of a float to an unsigned key (larger float, larger
// key); -0 maps like +0 so that ties compare as the CPU's floats do.
__device__ __forceinline__ std::uint32_t float_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const std::uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

// A candidate in (value desc, id asc) order.
struct Best {
  float v;
  std::int32_t id;
};
__device__ __forceinline__ bool before(const Best& a, const Best& b) {
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}
__device__ __forceinline__ Best take_better(const Best& a, const Best& b) {
  return before(b, a) ? b : a;
}

struct Shared {
  Best best[kWarps];
  double dsum[kWarps][kMassDigits + 1];
  double dtotal[kMassDigits + 1];
  int isum[kWarps];
  int hist[256];
  std::uint32_t u32;
  int i32;
  double f64;
};

// Block-wide arg-max in (value desc, id asc) order. Every thread gets it.
__device__ Best block_best(Best b, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.id, o)};
    b = take_better(b, other);
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.best[threadIdx.x / 32] = b;
  __syncthreads();
  Best r = sh.best[0];
  for (int w = 1; w < kWarps; ++w) r = take_better(r, sh.best[w]);
  return r;
}

// Deterministic block sums (fixed shuffle tree, warps summed in order).
__device__ double block_sum(double v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.dsum[threadIdx.x / 32][0] = v;
  __syncthreads();
  double r = 0.0;
  for (int w = 0; w < kWarps; ++w) r += sh.dsum[w][0];
  return r;
}
__device__ int block_count(int v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.isum[threadIdx.x / 32] = v;
  __syncthreads();
  int r = 0;
  for (int w = 0; w < kWarps; ++w) r += sh.isum[w];
  return r;
}

// The k-th largest key (1-based k, k <= number of selected elements) among
// the ids where `key_of(id, &key)` is true: 4 passes of 8-bit histograms.
template <typename KeyOf>
__device__ std::uint32_t select_kth_largest(int n, int k, KeyOf key_of, Shared& sh) {
  std::uint32_t prefix = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    const std::uint32_t high_mask = pass == 0 ? 0u : (0xFFFFFFFFu << (shift + 8));
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      std::uint32_t key;
      if (key_of(i, &key) && ((key ^ prefix) & high_mask) == 0) {
        atomicAdd(&sh.hist[(key >> shift) & 255u], 1);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int cum = 0, digit = 0;
      for (int d = 255; d >= 0; --d) {
        if (cum + sh.hist[d] >= k) {
          digit = d;
          break;
        }
        cum += sh.hist[d];
      }
      k -= cum;
      sh.u32 = prefix | (static_cast<std::uint32_t>(digit) << shift);
      sh.i32 = k;
    }
    __syncthreads();
    prefix = sh.u32;
    k = sh.i32;
  }
  return prefix;
}

// ---------------------------------------------------------------------------
// The kernel: one CTA per request.
// ---------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ SampleParams sp) {
  __shared__ Shared sh;
  const RowParams p = sp.rows[blockIdx.x];
  float* l = p.logits;
  const int vocab = sp.vocab;

  // Structured output first: ids the bitmask disallows -> -inf (sample()'s order).
  if (p.allowed != nullptr) {
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      if (((p.allowed[i >> 5] >> (i & 31)) & 1u) == 0) l[i] = -INFINITY;
    }
    __syncthreads();
  }

  // Suppression, logit bias and penalties, in place (sample()'s arithmetic, unfused).
  for (int e = threadIdx.x; e < p.num_entries; e += kThreads) {
    const PenaltyEntry pe = sp.entries[p.entries_begin + e];
    float v = l[pe.id];
    if ((pe.flags & kSuppressed) != 0) v = -INFINITY;
    if (pe.bias != 0.0f) v = __fadd_rn(v, pe.bias);
    if ((pe.flags & kSeen) != 0) {
      v = v > 0 ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
    }
    if (pe.count > 0) {
      v = __fsub_rn(v, __fadd_rn(p.presence_penalty,
                                 __fmul_rn(p.frequency_penalty, static_cast<float>(pe.count))));
    }
    l[pe.id] = v;
  }
  __syncthreads();

  // Max (greedy token) and log-normalizer of the processed logits.
  Best best{-INFINITY, INT_MAX};
  for (int i = threadIdx.x; i < vocab; i += kThreads) best = take_better(best, Best{l[i], i});
  best = block_best(best, sh);
  const float max_l = best.v;
  // Float terms summed per thread, then in double: logprobs need ~1e-6,
  // and the greedy path should stay one cheap pass.
  float z_thread = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) z_thread += expf(__fsub_rn(l[i], max_l));
  const double z = block_sum(static_cast<double>(z_thread), sh);
  const float log_z = __fadd_rn(max_l, static_cast<float>(log(z)));

  RowResult& out = sp.results[blockIdx.x];
  // Top-N logprobs: the i-th is the best strictly after the (i-1)-th.
  Best prev{INFINITY, -1};
  for (int t = 0; t < p.num_top; ++t) {
    Best b{-INFINITY, INT_MAX};
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const Best c{l[i], i};
      if (t == 0 || before(prev, c)) b = take_better(b, c);
    }
    b = block_best(b, sh);
    if (threadIdx.x == 0) {
      out.top_ids[t] = b.id;
      out.top_logprobs[t] = __fsub_rn(l[b.id], log_z);
    }
    prev = b;
  }

  if (!(p.temperature > 0.0f)) {
    if (threadIdx.x == 0) {
      out.token = best.id;
      out.logprob = __fsub_rn(max_l, log_z);
    }
    return;
  }

  const float temp = p.temperature;
  auto scaled = [&](int i) { return __fdiv_rn(l[i], temp); };
  const float s_max = __fdiv_rn(max_l, temp);
  int num = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) num += scaled(i) != -INFINITY;
  num = block_count(num, sh);

  // Kept set: key(s_i) >= k_min, then the top-p cut, then s_i >= min-p threshold.
  const bool top_k = p.top_k > 0 && p.top_k < num;
  std::uint32_t k_min = 0;
  if (top_k) {
    k_min = select_kth_largest(
        vocab, p.top_k,
        [&](int i, std::uint32_t* key) {
          const float s = scaled(i);
          *key = float_key(s);
          return s != -INFINITY;
        },
        sh);
  }
  auto kept_k = [&](float s) { return s != -INFINITY && float_key(s) >= k_min; };

  // Top-p: the cut value v has mass(s > v) < top_p <= mass(s >= v); ties at
  // v are kept in id order until the running mass reaches top_p.
  bool p_all = true;
  std::uint32_t v_key = 0;
  std::int32_t id_cut = INT_MAX;
  if (p.top_p < 1.0f) {
    double kept_z = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float s = scaled(i);
      if (kept_k(s)) kept_z += exp(static_cast<double>(__fsub_rn(s, s_max)));
    }
    kept_z = block_sum(kept_z, sh);
    const double target = static_cast<double>(p.top_p);
    std::uint32_t prefix = 0;
    p_all = false;
    for (int pass = 0; pass < 8; ++pass) {
      const int shift = 28 - 4 * pass;
      const std::uint32_t high_mask = pass == 0 ? 0u : (0xFFFFFFFFu << (shift + 4));
      double acc[kMassDigits + 1];
#pragma unroll
      for (int d = 0; d <= kMassDigits; ++d) acc[d] = 0.0;
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const float s = scaled(i);
        if (!kept_k(s)) continue;
        const std::uint32_t key = float_key(s);
        const bool match = ((key ^ prefix) & high_mask) == 0;
        // Below the prefix: no mass needed (after the first pass, most ids).
        if (!match && (key & high_mask) < (prefix & high_mask)) continue;
        const double w = exp(static_cast<double>(__fsub_rn(s, s_max)));
        if (match) {
          const int digit = static_cast<int>((key >> shift) & 15u);
#pragma unroll
          for (int d = 0; d < kMassDigits; ++d) acc[d] += d == digit ? w : 0.0;
        } else {
          acc[kMassDigits] += w;  // above the current prefix
        }
      }
#pragma unroll
      for (int d = 0; d <= kMassDigits; ++d) {
        for (int o = 16; o > 0; o >>= 1) acc[d] += __shfl_xor_sync(0xffffffffu, acc[d], o);
      }
      __syncthreads();
      if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int d = 0; d <= kMassDigits; ++d) sh.dsum[threadIdx.x / 32][d] = acc[d];
      }
      __syncthreads();
      if (threadIdx.x <= kMassDigits) {
        double t = 0.0;
        for (int w = 0; w < kWarps; ++w) t += sh.dsum[w][threadIdx.x];
        sh.dtotal[threadIdx.x] = t;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        double cum = sh.dtotal[kMassDigits];
        int digit = -1, lowest_nonempty = 0;
        for (int d = kMassDigits - 1; d >= 0; --d) {
          if (sh.dtotal[d] > 0.0) lowest_nonempty = d;
        }
        for (int d = kMassDigits - 1; d >= 0; --d) {
          cum += sh.dtotal[d];
          if (cum / kept_z >= target) {
            digit = d;
            break;
          }
        }
        // No crossing: on the first pass the whole kept mass is below top_p
        // (keep everything); later only by rounding (take the lowest digit).
        sh.i32 = digit < 0 && pass == 0 ? -1 : (digit < 0 ? lowest_nonempty : digit);
      }
      __syncthreads();
      const int digit = sh.i32;
      if (digit < 0) {
        p_all = true;
        break;
      }
      prefix |= static_cast<std::uint32_t>(digit) << shift;
    }
    if (!p_all) {
      v_key = prefix;
      // Ties at the cut value: mass strictly above it, then one tie at a time.
      double above = 0.0;
      int ties = 0;
      float v = 0.0f;
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const float s = scaled(i);
        if (!kept_k(s)) continue;
        const std::uint32_t key = float_key(s);
        if (key > v_key) above += exp(static_cast<double>(__fsub_rn(s, s_max)));
        if (key == v_key) {
          ++ties;
          v = s;
        }
      }
      above = block_sum(above, sh);
      ties = block_count(ties, sh);
      // v is the same value in every thread that saw a tie; share it.
      __syncthreads();
      if (ties > 0 && float_key(v) == v_key) sh.f64 = v;
      __syncthreads();
      if (ties > 1) {
        if (threadIdx.x == 0) {
          const double q = exp(static_cast<double>(__fsub_rn(static_cast<float>(sh.f64), s_max)));
          double mass = above / kept_z;
          int t = ties;
          for (int i = 1; i <= ties; ++i) {
            mass += q / kept_z;
            if (mass >= target) {
              t = i;
              break;
            }
          }
          sh.i32 = t;
        }
        __syncthreads();
        const int t = sh.i32;
        if (t < ties) {
          // The t-th smallest id among the ties: the t-th largest of ~id.
          id_cut = static_cast<std::int32_t>(~select_kth_largest(
              vocab, t,
              [&](int i, std::uint32_t* key) {
                *key = ~static_cast<std::uint32_t>(i);
                const float s = scaled(i);
                return kept_k(s) && float_key(s) == v_key;
              },
              sh));
        }
      }
    }
  }
  auto kept_p = [&](float s, int i) {
    if (p_all) return true;
    const std::uint32_t key = float_key(s);
    return key > v_key || (key == v_key && i <= id_cut);
  };
  const bool use_min_p = p.min_p > 0.0f && num > 0;
  const float min_p_threshold =
      __fadd_rn(s_max, static_cast<float>(log(static_cast<double>(p.min_p))));
  const bool filtered = top_k || p.top_p < 1.0f || p.min_p > 0.0f;

  // Gumbel-max over the kept ids.
  const std::uint64_t key = splitmix64(p.seed ^ splitmix64(p.index));
  Best draw{-INFINITY, INT_MAX};
  bool any = false;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float s = scaled(i);
    if (s == -INFINITY) continue;
    if (filtered && (!kept_k(s) || !kept_p(s, i) || (use_min_p && !(s >= min_p_threshold)))) {
      continue;
    }
    const Best c{__fadd_rn(s, gumbel(key, i)), i};
    draw = any ? take_better(draw, c) : c;
    any = true;
  }
  const int num_drawn = block_count(any ? 1 : 0, sh);
  if (num_drawn == 0) draw = Best{-INFINITY, INT_MAX};
  draw = block_best(draw, sh);
  if (threadIdx.x == 0) {
    const std::int32_t token = num_drawn > 0 ? draw.id : best.id;
    out.token = token;
    out.logprob = __fsub_rn(l[token], log_z);
  }
}

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

struct GpuSampler::Impl {
  int max_rows = 0;
  int vocab = 0;
  int mask_words = 0;  // ceil(vocab / 32)
  // Token bitmasks of the constrained rows, packed in request order:
  // [max_rows, mask_words] on both sides, sized once.
  cuda::PinnedBuffer host_masks;
  cuda::DeviceBuffer dev_masks;
  // Host scratch for building the penalty entries (zero between rows).
  std::vector<std::int32_t> counts;
  std::vector<std::int32_t> flags;
  std::vector<float> biases;
  std::vector<std::int32_t> touched;
  std::vector<PenaltyEntry> entries;
  std::vector<RowParams> rows;  // [max_rows]
  cuda::PinnedBuffer host_in, host_out;
  cuda::DeviceBuffer dev_in, dev_out;
};

GpuSampler::GpuSampler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuSampler::~GpuSampler() = default;

Result<std::unique_ptr<GpuSampler>> GpuSampler::create(int max_rows, int vocab_size) {
  if (max_rows < 1 || vocab_size < 1) return invalid_argument("GpuSampler needs rows and a vocab");
  auto impl = std::make_unique<Impl>();
  impl->max_rows = max_rows;
  impl->vocab = vocab_size;
  impl->counts.assign(static_cast<std::size_t>(vocab_size), 0);
  impl->flags.assign(static_cast<std::size_t>(vocab_size), 0);
  impl->biases.assign(static_cast<std::size_t>(vocab_size), 0.0f);
  impl->touched.reserve(static_cast<std::size_t>(vocab_size));
  impl->rows.resize(static_cast<std::size_t>(max_rows));
  const std::size_t out_bytes = static_cast<std::size_t>(max_rows) * sizeof(RowResult);
  VPOD_RETURN_IF_ERROR(impl->host_out.reserve(out_bytes));
  VPOD_ASSIGN_OR_RETURN(impl->dev_out, cuda::DeviceBuffer::allocate(out_bytes));
  impl->mask_words = (vocab_size + 31) / 32;
  const std::size_t mask_bytes =
      static_cast<std::size_t>(max_rows) * impl->mask_words * sizeof(std::uint32_t);
  VPOD_RETURN_IF_ERROR(impl->host_masks.reserve(mask_bytes));
  VPOD_ASSIGN_OR_RETURN(impl->dev_masks, cuda::DeviceBuffer::allocate(mask_bytes));
  return std::unique_ptr<GpuSampler>(new GpuSampler(std::move(impl)));
}

Status GpuSampler::sample(const TensorView& logits, std::span<const SampleRequest> requests,
                          cudaStream_t stream, std::span<SampleResult> out) {
  Impl& m = *impl_;
  if (requests.size() != out.size()) return invalid_argument("one result per request");
  if (requests.empty()) return {};
  if (static_cast<int>(requests.size()) > m.max_rows) {
    return out_of_range("GpuSampler: " + std::to_string(requests.size()) + " rows, created for " +
                        std::to_string(m.max_rows));
  }
  if (logits.rank() != 2 || logits.dtype() != DType::f32 || logits.device() != Device::cuda ||
      logits.size(1) != m.vocab || logits.stride(1) != 1) {
    return invalid_argument("GpuSampler: logits must be f32 [rows, " + std::to_string(m.vocab) +
                            "] on the GPU, got " + logits.to_string());
  }
  const int n = static_cast<int>(requests.size());
  // Per-row parameters and penalty entries; constrained rows' bitmasks packed.
  m.entries.clear();
  int num_masks = 0;
  auto* host_masks = static_cast<std::uint32_t*>(m.host_masks.data());
  const auto* dev_masks = static_cast<const std::uint32_t*>(m.dev_masks.data());
  std::vector<RowParams>& rows_storage = m.rows;
  for (int r = 0; r < n; ++r) {
    const SampleRequest& q = requests[static_cast<std::size_t>(r)];
    const SamplingConfig& c = q.config;
    if (q.row < 0 || q.row >= logits.size(0)) {
      return out_of_range("GpuSampler: request row " + std::to_string(q.row) + " outside [0, " +
                          std::to_string(logits.size(0)) + ")");
    }
    if (c.num_top_logprobs > kMaxGpuTopLogprobs) {
      return invalid_argument("GpuSampler: at most " + std::to_string(kMaxGpuTopLogprobs) +
                              " top logprobs, asked for " + std::to_string(c.num_top_logprobs));
    }
    const std::size_t begin = m.entries.size();
    m.touched.clear();
    auto touch = [&](std::int32_t id) {
      if (m.counts[id] == 0 && m.flags[id] == 0 && m.biases[id] == 0.0f) m.touched.push_back(id);
    };
    if (c.repetition_penalty != 1.0f) {
      for (auto ids : {q.prompt_ids, q.output_ids}) {
        for (std::int32_t id : ids) {
          if (id < 0 || id >= m.vocab) continue;
          touch(id);
          m.flags[id] |= kSeen;
        }
      }
    }
    if (c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f) {
      for (std::int32_t id : q.output_ids) {
        if (id < 0 || id >= m.vocab) continue;
        touch(id);
        ++m.counts[id];
      }
    }
    for (std::int32_t id : q.suppressed_ids) {
      if (id < 0 || id >= m.vocab) continue;
      touch(id);
      m.flags[id] |= kSuppressed;
    }
    for (const LogitBias& b : q.logit_bias) {
      if (b.token < 0 || b.token >= m.vocab || b.bias == 0.0f) continue;
      touch(b.token);
      m.biases[b.token] = b.bias;  // ids are unique (SampleRequest); the last one wins otherwise
    }
    for (std::int32_t id : m.touched) {
      m.entries.push_back({id, m.counts[id], m.flags[id], m.biases[id]});
      m.counts[id] = 0;
      m.flags[id] = 0;
      m.biases[id] = 0.0f;
    }
    RowParams& rp = rows_storage[static_cast<std::size_t>(r)];
    rp.logits = static_cast<float*>(logits.data()) + q.row * logits.stride(0);
    rp.temperature = c.temperature;
    rp.top_p = c.top_p;
    rp.min_p = c.min_p;
    rp.repetition_penalty = c.repetition_penalty;
    rp.presence_penalty = c.presence_penalty;
    rp.frequency_penalty = c.frequency_penalty;
    rp.top_k = c.top_k;
    rp.num_top = std::max(0, std::min(c.num_top_logprobs, m.vocab));
    rp.seed = c.seed;
    rp.index = c.index;
    rp.entries_begin = static_cast<std::int32_t>(begin);
    rp.num_entries = static_cast<std::int32_t>(m.entries.size() - begin);
    rp.allowed = nullptr;
    if (!q.allowed_tokens.empty()) {
      if (static_cast<int>(q.allowed_tokens.size()) < m.mask_words) {
        return invalid_argument("GpuSampler: the token bitmask has " +
                                std::to_string(q.allowed_tokens.size()) +
                                " words, the vocabulary needs " + std::to_string(m.mask_words));
      }
      const std::size_t offset = static_cast<std::size_t>(num_masks) * m.mask_words;
      std::memcpy(host_masks + offset, q.allowed_tokens.data(),
                  m.mask_words * sizeof(std::uint32_t));
      rp.allowed = dev_masks + offset;
      ++num_masks;
    }
  }
  for (int r = 0; r < n; ++r) {
    for (int s = r + 1; s < n; ++s) {
      if (requests[static_cast<std::size_t>(r)].row == requests[static_cast<std::size_t>(s)].row &&
          (rows_storage[static_cast<std::size_t>(r)].num_entries +
                   rows_storage[static_cast<std::size_t>(s)].num_entries >
               0 ||
           rows_storage[static_cast<std::size_t>(r)].allowed != nullptr ||
           rows_storage[static_cast<std::size_t>(s)].allowed != nullptr)) {
        // Masks, penalties and biases are applied in place: two requests on one row would race.
        return invalid_argument(
            "GpuSampler: two requests with a token bitmask, penalties or logit bias on one logits "
            "row");
      }
    }
  }
  const std::size_t rows_bytes = align_up(static_cast<std::size_t>(n) * sizeof(RowParams), 16);
  const std::size_t in_bytes = rows_bytes + m.entries.size() * sizeof(PenaltyEntry);
  VPOD_RETURN_IF_ERROR(m.host_in.reserve(in_bytes));
  if (m.dev_in.bytes() < in_bytes) {
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
    VPOD_ASSIGN_OR_RETURN(
        m.dev_in, cuda::DeviceBuffer::allocate(std::max<std::size_t>(2 * in_bytes, 1 << 16)));
  }
  auto* host = static_cast<std::uint8_t*>(m.host_in.data());
  std::memcpy(host, rows_storage.data(), static_cast<std::size_t>(n) * sizeof(RowParams));
  if (!m.entries.empty()) {
    std::memcpy(host + rows_bytes, m.entries.data(), m.entries.size() * sizeof(PenaltyEntry));
  }
  if (num_masks > 0) {
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(m.dev_masks.data(), m.host_masks.data(),
                        static_cast<std::size_t>(num_masks) * m.mask_words * sizeof(std::uint32_t),
                        cudaMemcpyHostToDevice, stream),
        StatusCode::internal);
  }
  auto* dev = static_cast<std::uint8_t*>(m.dev_in.data());
  VPOD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, in_bytes, cudaMemcpyHostToDevice, stream),
                            StatusCode::internal);
  SampleParams sp{reinterpret_cast<const RowParams*>(dev),
                  reinterpret_cast<const PenaltyEntry*>(dev + rows_bytes),
                  static_cast<RowResult*>(m.dev_out.data()), m.vocab};
  sample_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(sp);
  VPOD_CUDA_RETURN_IF_ERROR(cudaGetLastError(), StatusCode::internal);
  VPOD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m.host_out.data(), m.dev_out.data(),
                                            static_cast<std::size_t>(n) * sizeof(RowResult),
                                            cudaMemcpyDeviceToHost, stream),
                            StatusCode::internal);
  VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), StatusCode::internal);
  const auto* results = static_cast<const RowResult*>(m.host_out.data());
  for (int r = 0; r < n; ++r) {
    const RowResult& rr = results[r];
    SampleResult& o = out[static_cast<std::size_t>(r)];
    o.token = rr.token;
    o.logprob = rr.logprob;
    o.top.clear();
    const int num_top = rows_storage[static_cast<std::size_t>(r)].num_top;
    for (int t = 0; t < num_top; ++t) o.top.push_back({rr.top_ids[t], rr.top_logprobs[t]});
  }
  return {};
}

}  // namespace vpod::kernels
