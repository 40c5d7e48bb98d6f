// The CUDA backend: cuBLASLt GEMMs with fp32 accumulation, the fused kernels
// of src/kernels (RMSNorm + residual, RoPE + KV append, SiLU*mul, row
// gathers), a GEMV kernel for decode-sized GEMMs, attention from
// src/kernels/attention (planned once per step, reused by every layer) or the
// simple exact kernel, and CUDA graphs of whole decode steps keyed by their
// launch shape. One stream; nothing on the step path allocates except a rare
// growth of the attention plan's buffers (which drops the recorded graphs).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/cuda_check.h"
#include "common/log.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/event.h"
#include "cuda/graph.h"
#include "cuda/pinned_buffer.h"
#include "cuda/stream.h"
#include "kernels/activation/silu_mul.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/pod.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/cublaslt.h"
#include "kernels/gemm/gemv.h"
#include "kernels/norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "kernels/sampling/sampling_gpu.h"
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
           std::string(attention_mode_name(options_.attention_mode)) +
           (options_.attention == AttentionImpl::kernels ? "" : " simple") + ")";
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
    plan_valid_ = false;
    plan_.reset();
    pod_plan_.reset();
    step_shape_ = {tokens, seqs, s.num_logit_rows};
    return {};
  }

  Status plan_attention(const StepTensors& step, int num_q_heads, int num_kv_heads, int head_dim,
                        bool paged_kv) override {
    plan_valid_ = false;
    plan_.reset();
    pod_plan_.reset();
    if (!use_fast_attention(head_dim)) return {};
    attention::AttentionDims dims{num_q_heads, num_kv_heads, head_dim, options_.dtype};
    VPOD_RETURN_IF_ERROR(attention::validate_dims(dims));
    if (options_.attention_mode == AttentionMode::pod) {
      // POD: the fused prefill+decode kernel for hybrid batches; a prefill-
      // or decode-only step runs the serial kernels (the same plan as serial).
      if (!pod_device_) {
        VPOD_ASSIGN_OR_RETURN(pod_device_, attention::query_pod_device(dims));
        VPOD_ASSIGN_OR_RETURN(pod_counters_, attention::PodCounters::create(stream_.get()));
      }
      const bool hybrid = !step.batch->prefills.empty() && !step.batch->decodes.empty();
      attention::PodOptions pod_options;
      pod_options.mode = hybrid ? attention::AttentionMode::pod : attention::AttentionMode::serial;
      pod_options.device = *pod_device_;
      pod_options.decode_deep = !paged_kv;
      VPOD_ASSIGN_OR_RETURN(pod_plan_, attention::PodPlan::create(*step.batch, dims, pod_options));
    } else {
      VPOD_ASSIGN_OR_RETURN(
          plan_, attention::AttentionPlan::create(
                     *step.batch, dims, {.num_sms = gpu_.sm_count, .decode_deep = !paged_kv}));
    }
    const attention::AttentionPlan& plan = this->plan();
    if (plan.metadata_bytes() > attn_meta_.bytes() ||
        plan.workspace_bytes() > attn_workspace_.bytes()) {
      // Rare growth: the buffers only ever grow to the largest step seen.
      // Recorded graphs point into the old buffers: drop them.
      VPOD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()), StatusCode::internal);
      if (plan.metadata_bytes() > attn_meta_.bytes()) {
        VPOD_ASSIGN_OR_RETURN(attn_meta_, cuda::DeviceBuffer::allocate(std::max<std::size_t>(
                                              plan.metadata_bytes() * 2, 1 << 16)));
      }
      if (plan.workspace_bytes() > attn_workspace_.bytes()) {
        VPOD_ASSIGN_OR_RETURN(attn_workspace_, cuda::DeviceBuffer::allocate(std::max<std::size_t>(
                                                   plan.workspace_bytes() * 2, 1 << 16)));
      }
      graphs_.clear();
      seen_shapes_.clear();
    }
    buffers_ = {attn_meta_.data(), attn_meta_.bytes(), attn_workspace_.data(),
                attn_workspace_.bytes()};
    VPOD_RETURN_IF_ERROR(plan.upload(buffers_, stream_.get()));
    plan_valid_ = true;
    return {};
  }

  Result<StepGraph> try_step_graph(std::uint64_t caller_key) override {
    if (timing_ || options_.max_step_graphs <= 0) return StepGraph::eager;
    caller_key_ = caller_key;
    const GraphShape shape = current_shape();
    if (auto it = graphs_.find(shape); it != graphs_.end()) {
      it->second.last_use = ++graph_clock_;
      it->second.exec.launch(stream_.get());
      ++graph_stats_.launched;
      return StepGraph::launched;
    }
    // Record a shape the second time it is seen: the first, eager run loads
    // every kernel and caches cuBLASLt's choices outside the capture.
    if (seen_shapes_.count(shape) != 0) return StepGraph::capture;
    if (seen_shapes_.size() >= kMaxSeenShapes) seen_shapes_.clear();
    seen_shapes_.insert(shape);
    return StepGraph::eager;
  }

  Status begin_step_capture() override {
    VPOD_CHECK(!capture_.has_value());
    VPOD_ASSIGN_OR_RETURN(cuda::GraphCapture capture, cuda::GraphCapture::begin(stream_.get()));
    capture_.emplace(std::move(capture));
    capture_shape_ = current_shape();
    return {};
  }

  Status end_step_capture() override {
    VPOD_CHECK(capture_.has_value());
    Result<cuda::GraphExec> exec = capture_->finish();
    capture_.reset();
    VPOD_RETURN_IF_ERROR(exec.status());
    if (static_cast<int>(graphs_.size()) >= options_.max_step_graphs) {
      auto oldest = std::min_element(
          graphs_.begin(), graphs_.end(),
          [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
      graphs_.erase(oldest);
    }
    auto& entry = graphs_[capture_shape_];
    entry.exec = std::move(exec).value();
    entry.last_use = ++graph_clock_;
    ++graph_stats_.captured;
    entry.exec.launch(stream_.get());
    ++graph_stats_.launched;
    return {};
  }

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

  StepGraphStats step_graph_stats() const override {
    StepGraphStats s = graph_stats_;
    s.cached = static_cast<int>(graphs_.size());
    return s;
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
    if (options_.gemv && x.size(0) <= options_.decode.gemv_max_rows &&
        kernels::gemv_supported(x, w, bias, out)) {
      kernels::gemv_gpu(x, w, bias, out, stream_.get(), launch_options());
      return;
    }
    const Status s = lt_->gemm(x, w, bias, out, stream_.get());
    VPOD_CHECK_MSG(s.ok(), s.to_string());
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
    Timed timed(*this, kGemm);
    kernels::gemv_norm_gpu(gemv_input(in), w, bias, out, false, stream_.get(), launch_options());
  }
  void norm_linear_silu(const NormedRows& in, const TensorView& gate_up,
                        const TensorView& out) override {
    Timed timed(*this, kGemm);
    kernels::gemv_norm_gpu(gemv_input(in), gate_up, nullptr, out, true, stream_.get(),
                           launch_options());
  }
  void set_decode_tuning(const DecodeTuning& tuning) override {
    // Recorded graphs bake in the old launches: drop them.
    VPOD_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    options_.decode = tuning;
    graphs_.clear();
    seen_shapes_.clear();
  }
  DecodeTuning decode_tuning() const override { return options_.decode; }
  void head_rms_norm(const TensorView& x, const TensorView& w, float eps) override {
    Timed timed(*this, kOther);
    kernels::head_rms_norm_gpu(x, w, eps, stream_.get());
  }
  void rope_kv_append(const TensorView& q, const TensorView& k, const TensorView& v,
                      const RopeTable& rope, const StepTensors& step, const KvLayerView& kv,
                      const kernels::KvBlockTable& blocks) override {
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
    args.blocks = blocks;
    args.launch = launch_options();
    kernels::rope_kv_append_gpu(args, stream_.get());
  }

  bool supports_paged_kv(int head_dim) const override { return use_fast_attention(head_dim); }

  void attention(const TensorView& q, const KvLayerView& kv, const kernels::KvBlockTable& blocks,
                 const StepTensors& step, float scale, const TensorView& out) override {
    Timed timed(*this, kAttention);
    if (q.dtype() != DType::f32 && use_fast_attention(static_cast<int>(q.size(2)))) {
      const Status s = fast_attention(q, kv, blocks, step, scale, out);
      VPOD_CHECK_MSG(s.ok(), s.to_string());
      return;
    }
    VPOD_CHECK_MSG(!blocks.paged(), "paged KV needs the attention kernels (supports_paged_kv)");
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

  // Everything a recorded step's launches bake in (see Backend::try_step_graph).
  using GraphShape = std::array<std::int64_t, 12>;
  struct GraphEntry {
    cuda::GraphExec exec;
    std::uint64_t last_use = 0;
  };
  static constexpr std::size_t kMaxSeenShapes = 4096;

  GraphShape current_shape() const {
    GraphShape shape;
    shape.fill(-1);
    shape[0] = step_shape_[0];
    shape[1] = step_shape_[1];
    shape[2] = step_shape_[2];
    shape[8] = static_cast<std::int64_t>(caller_key_);
    if (plan_valid_) {
      const attention::AttentionPlan& plan = this->plan();
      shape[3] = static_cast<int>(plan.prefill_items().size());
      shape[4] = static_cast<int>(plan.decode_items().size());
      shape[5] = static_cast<int>(plan.prefill_combines().size());
      shape[6] = static_cast<int>(plan.decode_combines().size());
      shape[7] = plan.partial_rows();
    }
    if (pod_plan_) {
      // The fused launch's configuration (grid, kinds, decode tiles per CTA).
      const attention::PodConfig& pc = pod_plan_->config();
      shape[9] = static_cast<int>(pc.mode);
      shape[10] =
          static_cast<std::int64_t>(pc.grid) << 32 | static_cast<std::uint32_t>(pc.prefill_ctas);
      shape[11] = static_cast<std::int64_t>(pc.virtual_decode) << 32 |
                  static_cast<std::uint32_t>(static_cast<int>(pc.ratio));
    }
    return shape;
  }

  bool use_fast_attention(int head_dim) const {
    if (options_.attention != AttentionImpl::kernels || options_.dtype == DType::f32) return false;
    return head_dim == 64 || head_dim == 128;
  }

  // Runs the step's plan (plan_attention, once per step) for one layer.
  Status fast_attention(const TensorView& q, const KvLayerView& kv,
                        const kernels::KvBlockTable& blocks, const StepTensors& step, float scale,
                        const TensorView& out) {
    if (!plan_valid_) {
      // A caller that skipped plan_attention (direct backend use): plan now,
      // which must not happen inside a graph capture.
      VPOD_CHECK(!capture_.has_value());
      VPOD_RETURN_IF_ERROR(plan_attention(step, static_cast<int>(q.size(1)), kv.num_kv_heads,
                                          static_cast<int>(q.size(2)), blocks.paged()));
    }
    if (blocks.paged()) {
      PagedKvView paged;
      paged.k = kv.k;
      paged.v = kv.v;
      paged.dtype = kv.dtype;
      paged.device = kv.device;
      paged.num_blocks = blocks.num_blocks;
      paged.block_size = blocks.block_size;
      paged.num_kv_heads = kv.num_kv_heads;
      paged.head_dim = kv.head_dim;
      paged.block_stride = kv.slot_stride;
      paged.token_stride = kv.token_stride;
      paged.head_stride = kv.head_stride;
      paged.block_table = blocks.table;
      paged.num_slots = kv.num_slots;
      paged.max_blocks_per_slot = blocks.stride;
      if (pod_plan_) {
        return attention::paged_hybrid_attention(*pod_plan_, buffers_, *pod_counters_, q, paged,
                                                 out, scale, stream_.get());
      }
      if (plan_->num_prefill_tokens() > 0) {
        VPOD_RETURN_IF_ERROR(
            attention::paged_prefill(*plan_, buffers_, q, paged, out, scale, stream_.get()));
      }
      if (plan_->num_decode_tokens() > 0) {
        VPOD_RETURN_IF_ERROR(
            attention::paged_decode(*plan_, buffers_, q, paged, out, scale, stream_.get()));
      }
      return {};
    }
    if (pod_plan_) {
      return attention::hybrid_attention(*pod_plan_, buffers_, *pod_counters_, q, kv, out, scale,
                                         stream_.get());
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
  cuda::PinnedBuffer host_meta_;  // per-step metadata, copied up asynchronously
  cuda::DeviceBuffer meta_;
  // Attention plan of the current step.
  std::optional<attention::AttentionPlan> plan_;  // serial
  std::optional<attention::PodPlan> pod_plan_;    // pod (its attention() holds the work lists)
  std::optional<attention::PodDevice> pod_device_;
  std::optional<attention::PodCounters> pod_counters_;
  bool plan_valid_ = false;
  const attention::AttentionPlan& plan() const {
    return pod_plan_ ? pod_plan_->attention() : *plan_;
  }
  cuda::DeviceBuffer attn_meta_, attn_workspace_;
  attention::AttentionBuffers buffers_;
  std::array<int, 3> step_shape_{};  // tokens, sequences, logit rows of the step
  // Step graphs by launch shape, shapes seen once (recorded when seen again).
  std::map<GraphShape, GraphEntry> graphs_;
  std::set<GraphShape> seen_shapes_;
  std::uint64_t graph_clock_ = 0;
  std::uint64_t caller_key_ = 0;  // the model's buffers and KV views (try_step_graph)
  StepGraphStats graph_stats_;
  std::optional<cuda::GraphCapture> capture_;
  GraphShape capture_shape_{};
  std::unique_ptr<kernels::GpuSampler> sampler_;
  int sampler_rows_ = 0, sampler_vocab_ = 0;
  bool timing_ = false;
  std::vector<cuda::Event> events_;
  std::vector<std::pair<int, int>> timed_;  // (category, event pair index)
};

}  // namespace

std::string_view attention_mode_name(AttentionMode mode) {
  return mode == AttentionMode::pod ? "pod" : "serial";
}

Result<AttentionMode> parse_attention_mode(std::string_view text) {
  if (text == "serial") return AttentionMode::serial;
  if (text == "pod") return AttentionMode::pod;
  return invalid_argument("attention mode must be serial or pod, got '" + std::string(text) + "'");
}

bool pod_attention_built() { return true; }

Status apply_attention_flag(std::string_view flag, CudaBackendOptions* options) {
  if (flag == "simple") {
    options->attention_mode = AttentionMode::serial;
    options->attention = AttentionImpl::simple;
    return {};
  }
  if (flag == "kernels") flag = "serial";
  VPOD_ASSIGN_OR_RETURN(options->attention_mode, parse_attention_mode(flag));
  options->attention = AttentionImpl::kernels;
  return {};
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  if (options.attention_mode == AttentionMode::pod && !pod_attention_built()) {
    return unimplemented(
        "attention mode pod: not built yet (the fused POD launcher attention::pod in "
        "src/kernels/attention/pod* is not in this build); use --attention serial");
  }
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
