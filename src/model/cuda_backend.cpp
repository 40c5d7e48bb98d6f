// The CUDA backend: the tensor ops (cuBLASLt GEMMs with fp32 accumulation,
// the fused kernels of src/kernels: RMSNorm + residual, RoPE + KV append,
// SiLU*mul, row gathers; a GEMV kernel and decode fusions for decode-sized
// GEMMs), the step's metadata upload and the sampler, composed with the
// attention runner (cuda_attention_runner.h), the step-graph cache
// (cuda_graph_cache.h) and the op timer (cuda_step_timer.h). One stream;
// nothing on the step path allocates except a rare growth of a StepPlan's
// buffers (which drops the recorded graphs).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/cuda_check.h"
#include "common/log.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/pinned_buffer.h"
#include "cuda/stream.h"
#include "kernels/activation/silu_mul.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/cublaslt.h"
#include "kernels/gemm/gemv.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sampling/sampling_gpu.h"
#include "model/backend.h"
#include "model/cuda_attention_runner.h"
#include "model/cuda_graph_cache.h"
#include "model/cuda_step_timer.h"
#include "model/step_metadata.h"

namespace vpod::model {

namespace {

class CudaBuffer final : public BackendBuffer {
 public:
  explicit CudaBuffer(cuda::DeviceBuffer buffer) : buffer_(std::move(buffer)) {}
  void* data() const override { return buffer_.data(); }
  std::size_t bytes() const override { return buffer_.bytes(); }

 private:
  cuda::DeviceBuffer buffer_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(CudaBackendOptions options, cuda::GpuInfo gpu, cuda::Stream stream,
              std::unique_ptr<kernels::CublasLt> lt)
      : options_(options),
        gpu_(std::move(gpu)),
        stream_(std::move(stream)),
        lt_(std::move(lt)),
        attention_(options_, gpu_.sm_count, stream_.get()),
        graphs_(stream_.get(), options_.max_step_graphs),
        timer_(stream_.get()) {}

  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_.get());
  }

  Device device() const override { return Device::cuda; }
  DType compute_dtype() const override { return options_.dtype; }
  std::string description() const override {
    return "cuda " + gpu_.name + " (" + std::string(dtype_name(options_.dtype)) + ", attention " +
           std::string(attention::attention_mode_name(options_.attention_mode)) +
           (options_.attention == AttentionImpl::kernels ? "" : " simple") + ")";
  }
  cudaStream_t stream() const override { return stream_.get(); }

  Result<std::unique_ptr<BackendBuffer>> allocate(std::size_t bytes) override {
    VPOD_ASSIGN_OR_RETURN(cuda::DeviceBuffer buffer,
                          cuda::DeviceBuffer::allocate(std::max<std::size_t>(bytes, 256)));
    VPOD_CUDA_RETURN_IF_ERROR(cudaMemset(buffer.data(), 0, buffer.bytes()), StatusCode::internal);
    return std::unique_ptr<BackendBuffer>(std::make_unique<CudaBuffer>(std::move(buffer)));
  }

  Status upload(const void* src, DType src_dtype, std::int64_t numel, void* dst,
                DType dst_dtype) override {
    if (src_dtype == dst_dtype) {
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(dst, src, static_cast<std::size_t>(numel) * dtype_size(src_dtype),
                     cudaMemcpyHostToDevice),
          StatusCode::internal);
      return {};
    }
    // Convert on the host in chunks, then copy.
    constexpr std::int64_t kChunk = std::int64_t{1} << 22;
    std::vector<std::uint8_t> staging(static_cast<std::size_t>(std::min(numel, kChunk)) *
                                      dtype_size(dst_dtype));
    for (std::int64_t first = 0; first < numel; first += kChunk) {
      const std::int64_t count = std::min(kChunk, numel - first);
      const auto* s = static_cast<const std::uint8_t*>(src) + first * dtype_size(src_dtype);
      for (std::int64_t i = 0; i < count; ++i) {
        store_from_float(staging.data(), dst_dtype, i, load_as_float(s, src_dtype, i));
      }
      VPOD_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(static_cast<std::uint8_t*>(dst) + first * dtype_size(dst_dtype),
                     staging.data(), static_cast<std::size_t>(count) * dtype_size(dst_dtype),
                     cudaMemcpyHostToDevice),
          StatusCode::internal);
    }
    return {};
  }

  Status download(const void* src, std::size_t bytes, void* dst) override {
    VPOD_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()),
        StatusCode::internal);
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), StatusCode::internal);
    return {};
  }

  Status synchronize() override {
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), StatusCode::internal);
    return {};
  }

  bool idle() override { return cudaStreamQuery(stream_.get()) != cudaErrorNotReady; }

  Status reserve_step(int max_tokens, int max_sequences) override {
    // token_ids, positions, slots, kv_index, logit_rows: [max_tokens] each
    // (logit rows never exceed the tokens); 4 per-sequence arrays.
    max_tokens_ = max_tokens;
    max_sequences_ = max_sequences;
    const std::size_t ints =
        5 * static_cast<std::size_t>(max_tokens) + 4 * static_cast<std::size_t>(max_sequences);
    VPOD_RETURN_IF_ERROR(host_meta_.reserve(ints * sizeof(std::int32_t)));
    VPOD_ASSIGN_OR_RETURN(meta_, cuda::DeviceBuffer::allocate(ints * sizeof(std::int32_t)));
    return {};
  }

  Status prepare_step(const StepArrays& a, const HybridBatch& batch, StepTensors* out) override {
    const int tokens = static_cast<int>(a.token_ids.size());
    const int seqs = static_cast<int>(a.seq_slot.size());
    if (tokens > max_tokens_ || seqs > max_sequences_ ||
        static_cast<int>(a.logit_rows.size()) > max_tokens_) {
      return out_of_range("step exceeds the reserved metadata buffers");
    }
    // The previous step's copy must have left the pinned buffer.
    VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), StatusCode::internal);
    auto* host = static_cast<std::int32_t*>(host_meta_.data());
    auto* dev = meta_.as<std::int32_t>();
    std::size_t cursor = 0;
    auto put = [&](const std::vector<std::int32_t>& v) {
      std::memcpy(host + cursor, v.data(), v.size() * sizeof(std::int32_t));
      const std::int32_t* p = dev + cursor;
      cursor += v.size();
      return p;
    };
    StepTensors& s = *out;
    s.num_tokens = tokens;
    s.num_sequences = seqs;
    s.num_logit_rows = static_cast<int>(a.logit_rows.size());
    s.token_ids = put(a.token_ids);
    s.positions = put(a.positions);
    s.token_slots = put(a.token_slots);
    s.token_kv_index = put(a.token_kv_index);
    s.logit_rows = put(a.logit_rows);
    s.seq_slot = put(a.seq_slot);
    s.seq_cached_len = put(a.seq_cached_len);
    s.seq_num_new = put(a.seq_num_new);
    s.seq_token_offset = put(a.seq_token_offset);
    s.batch = &batch;
    VPOD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, cursor * sizeof(std::int32_t),
                                              cudaMemcpyHostToDevice, stream_.get()),
                              StatusCode::internal);
    return {};
  }

  Status plan_attention(const StepTensors& step, int num_q_heads, int num_kv_heads, int head_dim,
                        const PagedKvView* paged_kv, StepPlan& plan) override {
    VPOD_ASSIGN_OR_RETURN(const bool moved, attention_.plan(step, num_q_heads, num_kv_heads,
                                                            head_dim, paged_kv, plan));
    // Recorded graphs point into the old buffers: drop them.
    if (moved) graphs_.clear();
    return {};
  }

  Result<StepGraph> try_step_graph(const StepTensors& step, const StepPlan& plan,
                                   std::uint64_t caller_key) override {
    if (timer_.enabled() || graphs_.max_graphs() <= 0) return StepGraph::eager;
    return graphs_.lookup(make_step_graph_key(step, plan, caller_key));
  }
  Status begin_step_capture() override { return graphs_.begin_capture(); }
  Status end_step_capture() override { return graphs_.end_capture(); }
  void cancel_step_capture() override { graphs_.cancel_capture(); }
  StepGraphStats step_graph_stats() const override { return graphs_.stats(); }

  Status sample(const TensorView& logits, std::span<const kernels::SampleRequest> requests,
                std::span<kernels::SampleResult> out) override {
    if (requests.empty()) return {};
    const int rows = static_cast<int>(requests.size());
    const int vocab = logits.rank() == 2 ? static_cast<int>(logits.size(1)) : 0;
    if (sampler_ == nullptr || rows > sampler_rows_ || vocab != sampler_vocab_) {
      // Sized once (first call; again only for a larger batch or vocab).
      sampler_rows_ = std::max({rows, max_sequences_, sampler_rows_});
      sampler_vocab_ = vocab;
      VPOD_ASSIGN_OR_RETURN(sampler_, kernels::GpuSampler::create(sampler_rows_, vocab));
    }
    return sampler_->sample(logits, requests, stream_.get(), out);
  }

  void set_op_timing(bool enabled) override { timer_.set_enabled(enabled); }
  OpTimes take_op_times() override { return timer_.take(); }

  void embedding(const TensorView& table, std::int64_t first_id, const StepTensors& step,
                 const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::other);
    kernels::gather_rows_gpu(table, step.token_ids, step.num_tokens, out, stream_.get(), first_id);
  }
  void rms_norm(const TensorView& x, const TensorView& w, float eps,
                const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::other);
    kernels::rms_norm_gpu(x, w, eps, out, stream_.get());
  }
  void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& w,
                    float eps, const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::other);
    kernels::add_rms_norm_gpu(residual, delta, w, eps, out, stream_.get());
  }
  Status linear(const TensorView& x, const TensorView& w, const TensorView* bias,
                const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::gemm);
    if (options_.gemv && x.size(0) <= options_.decode.gemv_max_rows &&
        kernels::gemv_supported(x, w, bias, out)) {
      kernels::gemv_gpu(x, w, bias, out, stream_.get(), launch_options());
      return {};
    }
    return lt_->gemm(x, w, bias, out, stream_.get());
  }
  bool fused_decode(int num_tokens, int hidden_size) const override {
    return options_.decode.fuse && options_.gemv && options_.dtype != DType::f32 &&
           num_tokens >= 1 && num_tokens <= options_.decode.gemv_max_rows &&
           num_tokens <= kernels::kMaxGemvRows && hidden_size % 8 == 0 &&
           static_cast<std::int64_t>(num_tokens) * hidden_size *
                   static_cast<std::int64_t>(dtype_size(options_.dtype)) <=
               kernels::kGemvNormMaxSmemBytes;
  }
  void norm_linear(const NormedRows& in, const TensorView& w, const TensorView* bias,
                   const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::gemm);
    kernels::gemv_norm_gpu(gemv_input(in), w, bias, out, false, stream_.get(), launch_options());
  }
  void norm_linear_silu(const NormedRows& in, const TensorView& gate_up,
                        const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::gemm);
    kernels::gemv_norm_gpu(gemv_input(in), gate_up, nullptr, out, true, stream_.get(),
                           launch_options());
  }
  void set_decode_tuning(const DecodeTuning& tuning) override {
    // Recorded graphs bake in the old launches: drop them.
    VPOD_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    options_.decode = tuning;
    graphs_.clear();
  }
  DecodeTuning decode_tuning() const override { return options_.decode; }
  void head_rms_norm(const TensorView& x, const TensorView& w, float eps) override {
    StepTimer::Scope timed(timer_, OpCategory::other);
    kernels::head_rms_norm_gpu(x, w, eps, stream_.get());
  }
  void rope_kv_append(const TensorView& q, const TensorView& k, const TensorView& v,
                      const RopeTable& rope, const StepTensors& step, const KvCacheView& kv,
                      int layer) override {
    StepTimer::Scope timed(timer_, OpCategory::other);
    kernels::RopeKvAppendArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.positions = step.positions;
    args.slots = step.token_slots;
    args.kv_index = step.token_kv_index;
    args.inv_freq = rope.inv_freq;
    args.launch = launch_options();
    if (kv.is_paged()) {
      kernels::rope_kv_append_gpu(args, kv.paged[layer], stream_.get());
    } else {
      kernels::rope_kv_append_gpu(args, kv.contiguous[layer], stream_.get());
    }
  }

  bool supports_paged_kv(int head_dim) const override {
    return attention_.supports_paged(head_dim);
  }
  std::string paged_attention_description() const override {
    return attention_.paged_description();
  }

  Status attention(const TensorView& q, const KvCacheView& kv, int layer, const StepTensors& step,
                   const StepPlan& plan, float scale, const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::attention);
    return attention_.run(plan, q, kv, layer, step, scale, out);
  }

  void silu_mul(const TensorView& gate_up, const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::other);
    kernels::silu_mul_gpu(gate_up, out, stream_.get());
  }
  void gather_rows(const TensorView& x, const StepTensors& step, const TensorView& out) override {
    StepTimer::Scope timed(timer_, OpCategory::other);
    kernels::gather_rows_gpu(x, step.logit_rows, step.num_logit_rows, out, stream_.get());
  }

 private:
  kernels::LaunchOptions launch_options() const {
    return {.pdl = options_.decode.pdl, .pdl_early_trigger = options_.decode.pdl_early_trigger};
  }
  static kernels::GemvNormInput gemv_input(const NormedRows& in) {
    kernels::GemvNormInput g;
    g.residual = in.residual;
    if (in.delta != nullptr) g.delta = *in.delta;
    g.weight = in.weight;
    g.eps = in.eps;
    if (in.residual_out != nullptr) g.residual_out = *in.residual_out;
    g.rows = in.rows;
    g.num_rows = in.num_rows;
    return g;
  }
  CudaBackendOptions options_;
  cuda::GpuInfo gpu_;
  cuda::Stream stream_;
  std::unique_ptr<kernels::CublasLt> lt_;
  int max_tokens_ = 0;
  int max_sequences_ = 0;
  cuda::PinnedBuffer host_meta_;  // per-step metadata, copied up asynchronously
  cuda::DeviceBuffer meta_;
  AttentionRunner attention_;
  StepGraphCache graphs_;
  StepTimer timer_;
  std::unique_ptr<kernels::GpuSampler> sampler_;
  int sampler_rows_ = 0, sampler_vocab_ = 0;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  VPOD_ASSIGN_OR_RETURN(auto gpus, cuda::query_gpus());
  if (options.device < 0 || options.device >= static_cast<int>(gpus.size())) {
    return unavailable("no CUDA device " + std::to_string(options.device) + " (" +
                       std::to_string(gpus.size()) + " found)");
  }
  VPOD_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device), StatusCode::unavailable);
  VPOD_ASSIGN_OR_RETURN(auto lt, kernels::CublasLt::create(options.gemm_workspace_bytes));
  VPOD_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::create());
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(options, gpus[options.device],
                                                                std::move(stream), std::move(lt)));
}

}  // namespace vpod::model
