// The CUDA backend: cuBLASLt GEMMs with fp32 accumulation, the fused kernels
// of src/kernels (RMSNorm + residual, RoPE + KV append, SiLU*mul, row
// gathers), attention from src/kernels/attention (planned once per step,
// reused by every layer) or the simple exact kernel. One stream; nothing on
// the step path allocates except a rare growth of the attention plan's
// metadata buffer.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "common/cuda_check.h"
#include "common/log.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/event.h"
#include "cuda/stream.h"
#include "kernels/activation/silu_mul.h"
#include "kernels/attention/attention.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/cublaslt.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "model/backend.h"
#include "model/simple_attention.h"
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

// Page-locked host memory for the per-step metadata copy.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status resize(std::size_t bytes) {
    if (bytes <= bytes_) return {};
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    bytes_ = 0;
    VPOD_CUDA_RETURN_IF_ERROR(cudaMallocHost(&data_, bytes), StatusCode::resource_exhausted);
    bytes_ = bytes;
    return {};
  }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(CudaBackendOptions options, cuda::GpuInfo gpu, cuda::Stream stream,
              std::unique_ptr<kernels::CublasLt> lt)
      : options_(options), gpu_(std::move(gpu)), stream_(std::move(stream)), lt_(std::move(lt)) {}

  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_.get());
  }

  Device device() const override { return Device::cuda; }
  DType compute_dtype() const override { return options_.dtype; }
  std::string description() const override {
    return "cuda " + gpu_.name + " (" + std::string(dtype_name(options_.dtype)) + ", attention " +
           (options_.attention == AttentionImpl::kernels ? "kernels" : "simple") + ")";
  }
  cudaStream_t stream() const { return stream_.get(); }

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

  Status reserve_step(int max_tokens, int max_sequences) override {
    // token_ids, positions, slots, kv_index, logit_rows: [max_tokens] each
    // (logit rows never exceed the tokens); 4 per-sequence arrays.
    max_tokens_ = max_tokens;
    max_sequences_ = max_sequences;
    const std::size_t ints =
        5 * static_cast<std::size_t>(max_tokens) + 4 * static_cast<std::size_t>(max_sequences);
    VPOD_RETURN_IF_ERROR(host_meta_.resize(ints * sizeof(std::int32_t)));
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
    plan_valid_ = false;
    return {};
  }

  void set_op_timing(bool enabled) override {
    timing_ = enabled;
    if (enabled && events_.empty()) {
      for (int i = 0; i < kMaxTimedOps * 2; ++i) {
        auto e = cuda::Event::create(cuda::Event::Timing::enabled);
        VPOD_CHECK(e.ok());
        events_.push_back(std::move(e).value());
      }
    }
    timed_.clear();
  }

  OpTimes take_op_times() override {
    OpTimes t;
    VPOD_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    for (const auto& [category, index] : timed_) {
      const double ms = cuda::Event::elapsed_ms(events_[2 * index], events_[2 * index + 1]);
      (category == 0 ? t.gemm_ms : category == 1 ? t.attention_ms : t.other_ms) += ms;
      ++t.num_ops;
    }
    timed_.clear();
    return t;
  }

  void embedding(const TensorView& table, const StepTensors& step, const TensorView& out) override {
    Timed timed(*this, kOther);
    kernels::gather_rows_gpu(table, step.token_ids, step.num_tokens, out, stream_.get());
  }
  void rms_norm(const TensorView& x, const TensorView& w, float eps,
                const TensorView& out) override {
    Timed timed(*this, kOther);
    kernels::rms_norm_gpu(x, w, eps, out, stream_.get());
  }
  void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& w,
                    float eps, const TensorView& out) override {
    Timed timed(*this, kOther);
    kernels::add_rms_norm_gpu(residual, delta, w, eps, out, stream_.get());
  }
  void linear(const TensorView& x, const TensorView& w, const TensorView* bias,
              const TensorView& out) override {
    Timed timed(*this, kGemm);
    const Status s = lt_->gemm(x, w, bias, out, stream_.get());
    VPOD_CHECK_MSG(s.ok(), s.to_string());
  }
  void head_rms_norm(const TensorView& x, const TensorView& w, float eps) override {
    Timed timed(*this, kOther);
    kernels::head_rms_norm_gpu(x, w, eps, stream_.get());
  }
  void rope_kv_append(const TensorView& q, const TensorView& k, const TensorView& v,
                      const RopeTable& rope, const StepTensors& step,
                      const KvLayerView& kv) override {
    Timed timed(*this, kOther);
    kernels::RopeKvAppendArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.positions = step.positions;
    args.slots = step.token_slots;
    args.kv_index = step.token_kv_index;
    args.inv_freq = rope.inv_freq;
    args.kv = kv;
    kernels::rope_kv_append_gpu(args, stream_.get());
  }

  void attention(const TensorView& q, const KvLayerView& kv, const StepTensors& step, float scale,
                 const TensorView& out) override {
    Timed timed(*this, kAttention);
    if (use_fast_attention(q)) {
      const Status s = fast_attention(q, kv, step, scale, out);
      VPOD_CHECK_MSG(s.ok(), s.to_string());
      return;
    }
    simple_attention_gpu(q, kv, step.token_slots, step.token_kv_index, scale, out, stream_.get());
  }

  void silu_mul(const TensorView& gate_up, const TensorView& out) override {
    Timed timed(*this, kOther);
    kernels::silu_mul_gpu(gate_up, out, stream_.get());
  }
  void gather_rows(const TensorView& x, const StepTensors& step, const TensorView& out) override {
    Timed timed(*this, kOther);
    kernels::gather_rows_gpu(x, step.logit_rows, step.num_logit_rows, out, stream_.get());
  }

 private:
  static constexpr int kGemm = 0, kAttention = 1, kOther = 2;
  static constexpr int kMaxTimedOps = 4096;
  // Records an event pair around one op while timing is on.
  class Timed {
   public:
    Timed(CudaBackend& b, int category) : b_(b) {
      if (!b_.timing_ || b_.timed_.size() >= kMaxTimedOps) return;
      index_ = static_cast<int>(b_.timed_.size());
      b_.timed_.emplace_back(category, index_);
      b_.events_[2 * index_].record(b_.stream_.get());
    }
    ~Timed() {
      if (index_ >= 0) b_.events_[2 * index_ + 1].record(b_.stream_.get());
    }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    CudaBackend& b_;
    int index_ = -1;
  };

  bool use_fast_attention(const TensorView& q) const {
    if (options_.attention != AttentionImpl::kernels) return false;
    return q.dtype() != DType::f32 && (q.size(2) == 64 || q.size(2) == 128);
  }

  // Plans on the first layer of a step; every layer reuses the plan.
  Status fast_attention(const TensorView& q, const KvLayerView& kv, const StepTensors& step,
                        float scale, const TensorView& out) {
    const HybridBatch& batch = *step.batch;
    if (!plan_valid_) {
      attention::AttentionDims dims{static_cast<int>(q.size(1)), kv.num_kv_heads,
                                    static_cast<int>(q.size(2)), q.dtype()};
      VPOD_RETURN_IF_ERROR(attention::validate_dims(dims));
      VPOD_ASSIGN_OR_RETURN(
          plan_, attention::AttentionPlan::create(batch, dims, {.num_sms = gpu_.sm_count}));
      if (plan_->metadata_bytes() > attn_meta_.bytes() ||
          plan_->workspace_bytes() > attn_workspace_.bytes()) {
        // Rare growth: the buffers only ever grow to the largest step seen.
        VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), StatusCode::internal);
        if (plan_->metadata_bytes() > attn_meta_.bytes()) {
          VPOD_ASSIGN_OR_RETURN(attn_meta_, cuda::DeviceBuffer::allocate(std::max<std::size_t>(
                                                plan_->metadata_bytes() * 2, 1 << 16)));
        }
        if (plan_->workspace_bytes() > attn_workspace_.bytes()) {
          VPOD_ASSIGN_OR_RETURN(attn_workspace_, cuda::DeviceBuffer::allocate(std::max<std::size_t>(
                                                     plan_->workspace_bytes() * 2, 1 << 16)));
        }
      }
      buffers_ = {attn_meta_.data(), attn_meta_.bytes(), attn_workspace_.data(),
                  attn_workspace_.bytes()};
      VPOD_RETURN_IF_ERROR(plan_->upload(buffers_, stream_.get()));
      plan_valid_ = true;
    }
    if (plan_->num_prefill_tokens() > 0) {
      VPOD_RETURN_IF_ERROR(attention::prefill(*plan_, buffers_, q, kv, out, scale, stream_.get()));
    }
    if (plan_->num_decode_tokens() > 0) {
      VPOD_RETURN_IF_ERROR(attention::decode(*plan_, buffers_, q, kv, out, scale, stream_.get()));
    }
    return {};
  }

  CudaBackendOptions options_;
  cuda::GpuInfo gpu_;
  cuda::Stream stream_;
  std::unique_ptr<kernels::CublasLt> lt_;
  int max_tokens_ = 0;
  int max_sequences_ = 0;
  PinnedBuffer host_meta_;
  cuda::DeviceBuffer meta_;
  // Attention plan of the current step.
  std::optional<attention::AttentionPlan> plan_;
  bool plan_valid_ = false;
  cuda::DeviceBuffer attn_meta_, attn_workspace_;
  attention::AttentionBuffers buffers_;
  bool timing_ = false;
  std::vector<cuda::Event> events_;
  std::vector<std::pair<int, int>> timed_;  // (category, event pair index)
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
