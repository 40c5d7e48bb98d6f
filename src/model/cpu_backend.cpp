// The CPU backend: fp32 activations and weights (converted from any stored
// dtype at load), the kernels' CPU references as its ops. It is the
// correctness reference for the CUDA backend and runs the tiny models in CI.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/check.h"
#include "kernels/activation/silu_mul.h"
#include "kernels/attention/attention_reference.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/gemm.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "model/backend.h"
#include "model/step_metadata.h"

namespace vpod::model {

namespace {

class HostBuffer final : public BackendBuffer {
 public:
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes) {
    // 64-byte aligned, zeroed (a fresh KV cache reads as zeros).
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    if (data_ != nullptr) std::memset(data_, 0, rounded);
  }
  ~HostBuffer() override { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() const override { return data_; }
  std::size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

float* fp(const TensorView& t) {
  VPOD_CHECK_MSG(t.device() == Device::cpu && t.dtype() == DType::f32,
                 "cpu backend expects fp32 host tensors, got " + t.to_string());
  return static_cast<float*>(t.data());
}

// Row stride of a [rows, ...] view whose trailing dimensions are contiguous.
std::int64_t row_stride(const TensorView& t) { return t.stride(0); }

void check_rows(const TensorView& t, std::int64_t rows, std::int64_t cols) {
  VPOD_CHECK_MSG(t.rank() == 2 && t.size(0) == rows && t.size(1) == cols && t.stride(1) == 1,
                 "expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "], got " +
                     t.to_string());
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {}

  Device device() const override { return Device::cpu; }
  DType compute_dtype() const override { return DType::f32; }
  std::string description() const override {
    return "cpu (fp32, " + std::to_string(threads_) + " threads)";
  }

  Result<std::unique_ptr<BackendBuffer>> allocate(std::size_t bytes) override {
    auto buffer = std::make_unique<HostBuffer>(bytes);
    if (buffer->data() == nullptr) {
      return resource_exhausted("cannot allocate " + std::to_string(bytes) +
                                " bytes of host memory");
    }
    return std::unique_ptr<BackendBuffer>(std::move(buffer));
  }

  Status upload(const void* src, DType src_dtype, std::int64_t numel, void* dst,
                DType dst_dtype) override {
    if (src_dtype == dst_dtype) {
      std::memcpy(dst, src, static_cast<std::size_t>(numel) * dtype_size(src_dtype));
      return {};
    }
    for (std::int64_t i = 0; i < numel; ++i) {
      store_from_float(dst, dst_dtype, i, load_as_float(src, src_dtype, i));
    }
    return {};
  }

  Status download(const void* src, std::size_t bytes, void* dst) override {
    std::memcpy(dst, src, bytes);
    return {};
  }
  Status synchronize() override { return {}; }

  Status reserve_step(int, int) override { return {}; }

  Status prepare_step(const StepArrays& arrays, const HybridBatch& batch,
                      StepTensors* out) override {
    arrays_ = arrays;
    StepTensors& s = *out;
    s.num_tokens = static_cast<int>(arrays_.token_ids.size());
    s.num_sequences = static_cast<int>(arrays_.seq_slot.size());
    s.num_logit_rows = static_cast<int>(arrays_.logit_rows.size());
    s.token_ids = arrays_.token_ids.data();
    s.positions = arrays_.positions.data();
    s.token_slots = arrays_.token_slots.data();
    s.token_kv_index = arrays_.token_kv_index.data();
    s.seq_slot = arrays_.seq_slot.data();
    s.seq_cached_len = arrays_.seq_cached_len.data();
    s.seq_num_new = arrays_.seq_num_new.data();
    s.seq_token_offset = arrays_.seq_token_offset.data();
    s.logit_rows = arrays_.logit_rows.data();
    s.batch = &batch;
    return {};
  }

  void embedding(const TensorView& table, std::int64_t first_id, const StepTensors& step,
                 const TensorView& out) override {
    check_rows(out, step.num_tokens, table.size(1));
    const std::int64_t rows = table.size(0);
    const auto dim = static_cast<std::size_t>(table.size(1));
    for (int t = 0; t < step.num_tokens; ++t) {
      const std::int64_t id = step.token_ids[t] - first_id;
      float* dst = fp(out) + t * row_stride(out);
      if (id < 0 || id >= rows) {
        std::fill(dst, dst + dim, 0.0f);  // another rank's vocab slice
      } else {
        std::copy_n(fp(table) + id * row_stride(table), dim, dst);
      }
    }
  }

  void rms_norm(const TensorView& x, const TensorView& weight, float eps,
                const TensorView& out) override {
    check_rows(out, x.size(0), x.size(1));
    kernels::rms_norm_ref(fp(x), row_stride(x), fp(weight), eps, fp(out), row_stride(out),
                          static_cast<int>(x.size(0)), static_cast<int>(x.size(1)));
  }

  void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& weight,
                    float eps, const TensorView& out) override {
    check_rows(delta, residual.size(0), residual.size(1));
    check_rows(out, residual.size(0), residual.size(1));
    kernels::add_rms_norm_ref(
        fp(residual), row_stride(residual), fp(delta), row_stride(delta), fp(weight), eps, fp(out),
        row_stride(out), static_cast<int>(residual.size(0)), static_cast<int>(residual.size(1)));
  }

  Status linear(const TensorView& x, const TensorView& weight, const TensorView* bias,
                const TensorView& out) override {
    matmul(x, weight, bias, out);
    return {};
  }

  void matmul(const TensorView& x, const TensorView& weight, const TensorView* bias,
              const TensorView& out) {
    const int m = static_cast<int>(x.size(0));
    const int k = static_cast<int>(x.size(1));
    const int n = static_cast<int>(weight.size(0));
    VPOD_CHECK(weight.size(1) == k);
    check_rows(out, m, n);
    kernels::gemm_ref(fp(x), row_stride(x), fp(weight), row_stride(weight),
                      bias != nullptr ? fp(*bias) : nullptr, fp(out), row_stride(out), m, n, k,
                      threads_);
  }

  void head_rms_norm(const TensorView& x, const TensorView& weight, float eps) override {
    VPOD_CHECK(x.rank() == 3 && x.size(2) == weight.size(0));
    const int d = static_cast<int>(x.size(2));
    for (std::int64_t t = 0; t < x.size(0); ++t) {
      float* row = fp(x) + t * x.stride(0);
      kernels::rms_norm_ref(row, x.stride(1), fp(weight), eps, row, x.stride(1),
                            static_cast<int>(x.size(1)), d);
    }
  }

  void rope_kv_append(const TensorView& q, const TensorView& k, const TensorView& v,
                      const RopeTable& rope, const StepTensors& step, const KvCacheView& kv,
                      int layer) override {
    const int rows = step.num_tokens;
    VPOD_CHECK(q.size(0) == rows && k.size(0) == rows && v.size(0) == rows);
    kernels::rope_ref(fp(q), q.stride(0), rows, static_cast<int>(q.size(1)), rope.head_dim,
                      step.positions, rope.inv_freq);
    kernels::rope_ref(fp(k), k.stride(0), rows, static_cast<int>(k.size(1)), rope.head_dim,
                      step.positions, rope.inv_freq);
    if (kv.is_paged()) {
      kernels::kv_append_ref(fp(k), k.stride(0), fp(v), v.stride(0), rows, step.token_slots,
                             step.token_kv_index, kv.paged[layer]);
    } else {
      kernels::kv_append_ref(fp(k), k.stride(0), fp(v), v.stride(0), rows, step.token_slots,
                             step.token_kv_index, kv.contiguous[layer]);
    }
  }

  bool supports_paged_kv(int) const override { return true; }
  std::string paged_attention_description() const override {
    return "vpod's CPU reference attention over block tables";
  }

  // The kernels' CPU reference in fp32 (attention_reference.h).
  Status attention(const TensorView& q, const KvCacheView& kv, int layer, const StepTensors& step,
                   const StepPlan& plan, float scale, const TensorView& out) override {
    (void)plan;
    VPOD_CHECK(q.rank() == 3 && out.rank() == 3 && q.size(0) == step.num_tokens);
    (void)fp(q), (void)fp(out);
    const auto precision = attention::ReferencePrecision::fp32;
    if (kv.is_paged()) {
      const PagedKvView& p = kv.paged[layer];
      return attention::reference_attention(*step.batch, dims(q, p.num_kv_heads, p.dtype), q, p,
                                            out, scale, precision);
    }
    const KvLayerView& c = kv.contiguous[layer];
    return attention::reference_attention(*step.batch, dims(q, c.num_kv_heads, c.dtype), q, c, out,
                                          scale, precision);
  }

  void silu_mul(const TensorView& gate_up, const TensorView& out) override {
    check_rows(out, gate_up.size(0), gate_up.size(1) / 2);
    kernels::silu_mul_ref(fp(gate_up), row_stride(gate_up), fp(out), row_stride(out),
                          static_cast<int>(out.size(0)), static_cast<int>(out.size(1)));
  }

  void gather_rows(const TensorView& x, const StepTensors& step, const TensorView& out) override {
    check_rows(out, step.num_logit_rows, x.size(1));
    kernels::gather_rows_ref(fp(x), row_stride(x), x.size(0), step.logit_rows, step.num_logit_rows,
                             static_cast<int>(x.size(1)), fp(out), row_stride(out));
  }

  // Decode fusions by composition of the ops above (same fp32 results), so
  // CI runs the model's fused orchestration (model.cpp) on the CPU too.
  bool fused_decode(int num_tokens, int hidden_size) const override {
    (void)hidden_size;
    return tuning_.fuse && num_tokens >= 1 && num_tokens <= tuning_.gemv_max_rows &&
           num_tokens <= kernels::kMaxGemvRows;
  }
  void norm_linear(const NormedRows& in, const TensorView& weight, const TensorView* bias,
                   const TensorView& out) override {
    matmul(normalize(in), weight, bias, out);
  }
  void norm_linear_silu(const NormedRows& in, const TensorView& gate_up,
                        const TensorView& out) override {
    const TensorView x = normalize(in);
    gate_up_.resize(static_cast<std::size_t>(in.num_rows * gate_up.size(0)));
    const TensorView g(gate_up_.data(), DType::f32, {in.num_rows, gate_up.size(0)}, Device::cpu);
    matmul(x, gate_up, nullptr, g);
    silu_mul(g, out);
  }
  void set_decode_tuning(const DecodeTuning& tuning) override { tuning_ = tuning; }
  DecodeTuning decode_tuning() const override { return tuning_; }

  Status sample(const TensorView& logits, std::span<const kernels::SampleRequest> requests,
                std::span<kernels::SampleResult> out) override {
    if (requests.size() != out.size()) return invalid_argument("one result per request");
    if (logits.rank() != 2 || logits.dtype() != DType::f32 || logits.stride(1) != 1) {
      return invalid_argument("sample: logits must be f32 [rows, vocab], got " +
                              logits.to_string());
    }
    const int vocab = static_cast<int>(logits.size(1));
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const kernels::SampleRequest& r = requests[i];
      if (r.row < 0 || r.row >= logits.size(0)) return out_of_range("sample: row out of range");
      if (!r.allowed_tokens.empty() &&
          r.allowed_tokens.size() * 32 < static_cast<std::size_t>(vocab))
        return invalid_argument("sample: the token bitmask is shorter than the vocabulary");
      const float* row = fp(logits) + r.row * logits.stride(0);
      kernels::sample(std::span<const float>(row, vocab), r.config, r.prompt_ids, r.output_ids,
                      r.suppressed_ids, r.logit_bias, r.allowed_tokens, workspace_, out[i]);
    }
    return {};
  }

 private:
  static attention::AttentionDims dims(const TensorView& q, int num_kv_heads, DType kv_dtype) {
    return {static_cast<int>(q.size(1)), num_kv_heads, static_cast<int>(q.size(2)), kv_dtype};
  }

  // The rows of `in` normalized into normed_ ([num_rows, hidden]); writes
  // in.residual_out. Row by row through the references add_rms_norm / rms_norm use.
  TensorView normalize(const NormedRows& in) {
    const std::int64_t k = in.residual.size(1);
    const int rows = in.num_rows;
    normed_.resize(static_cast<std::size_t>(rows * k));
    sum_.resize(static_cast<std::size_t>(k));
    for (int m = 0; m < rows; ++m) {
      const std::int64_t r = in.rows != nullptr ? in.rows[m] : m;
      VPOD_CHECK(r >= 0 && r < in.residual.size(0));
      const float* res = fp(in.residual) + r * in.residual.stride(0);
      float* x = normed_.data() + m * k;
      if (in.delta == nullptr) {
        kernels::rms_norm_ref(res, k, fp(in.weight), in.eps, x, k, 1, static_cast<int>(k));
        continue;
      }
      std::copy(res, res + k, sum_.data());
      kernels::add_rms_norm_ref(sum_.data(), k, fp(*in.delta) + r * in.delta->stride(0), k,
                                fp(in.weight), in.eps, x, k, 1, static_cast<int>(k));
      if (in.residual_out != nullptr) {
        std::copy(sum_.begin(), sum_.end(), fp(*in.residual_out) + m * in.residual_out->stride(0));
      }
    }
    return TensorView(normed_.data(), DType::f32, {rows, k}, Device::cpu);
  }

  kernels::SamplingWorkspace workspace_;
  int threads_;
  StepArrays arrays_;
  DecodeTuning tuning_;
  std::vector<float> normed_, sum_, gate_up_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace vpod::model
