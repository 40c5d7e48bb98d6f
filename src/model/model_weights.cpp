// Model::load_weights: the checkpoint's tensors onto the backend, one
// allocation carved in layout order. Under tensor parallelism a rank loads
// only its slices (tensor_parallel.h): row slices are one contiguous run of
// the memory-mapped file, column slices (o_proj, down_proj) are gathered row
// by row into a host staging buffer and uploaded once; only the pages of the
// mapping those bytes sit on are read.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <unistd.h>

#include "common/log.h"
#include "kernels/rope/rope.h"
#include "model/model.h"
#include "model/weight_layout.h"

namespace vpod::model {

namespace {

kernels::RopeParams rope_params(const RopeConfig& r) {
  kernels::RopeParams p;
  p.theta = r.theta;
  p.scaling = r.scaling == RopeScaling::none     ? kernels::RopeScalingType::none
              : r.scaling == RopeScaling::linear ? kernels::RopeScalingType::linear
                                                 : kernels::RopeScalingType::llama3;
  p.factor = r.factor;
  p.low_freq_factor = r.low_freq_factor;
  p.high_freq_factor = r.high_freq_factor;
  p.original_max_position_embeddings = r.original_max_position_embeddings;
  return p;
}

// Weight-upload progress: a bar on stderr on a terminal; otherwise a log
// line per tenth of the bytes (with the elapsed time), so a service log shows
// the load moving.
class Progress {
 public:
  explicit Progress(std::uint64_t total)
      : total_(total), enabled_(::isatty(2) != 0), start_(std::chrono::steady_clock::now()) {}
  void add(std::uint64_t bytes) {
    done_ += bytes;
    if (total_ == 0) return;
    const int percent = static_cast<int>(100 * std::min(done_, total_) / total_);
    if (!enabled_) {
      constexpr int kLogStepPercent = 10;
      if (percent / kLogStepPercent == last_ / kLogStepPercent) return;
      last_ = percent;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      VPOD_LOG_INFO("loading weights: {}% ({:.2f} of {:.2f} GB, {:.1f} s)", percent,
                    static_cast<double>(done_) / 1e9, static_cast<double>(total_) / 1e9, seconds);
      return;
    }
    if (percent == last_) return;
    last_ = percent;
    constexpr int kWidth = 40;
    const int filled = percent * kWidth / 100;
    std::fprintf(stderr, "\rloading weights [%.*s%*s] %3d%% (%.1f GB)", filled,
                 "########################################", kWidth - filled, "", percent,
                 static_cast<double>(done_) / 1e9);
    if (done_ >= total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  int last_ = 0;  // percent last shown (the 0% line is not)
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

Status Model::load_weights(const WeightSource& source) {
  const ModelConfig& c = local_;  // this rank's shapes (the whole model at size 1)
  const ShardLayout& s = shard_;
  const DType dt = backend_.compute_dtype();
  const std::int64_t h = c.hidden_size;
  const std::int64_t d = c.head_dim;
  const std::int64_t q_rows = c.q_size();
  const std::int64_t kv_rows = c.kv_size();
  const std::int64_t qkv_rows = q_rows + 2 * kv_rows;
  const std::int64_t inter = c.intermediate_size;
  const std::int64_t vocab = c.vocab_size;
  // Where this rank's slices start in the full tensors.
  const std::int64_t q_row0 = s.first_q_head() * d;
  const std::int64_t kv_row0 = static_cast<std::int64_t>(s.first_kv_head) * d;
  const std::int64_t inter0 = s.first_intermediate();
  const std::int64_t vocab0 = s.first_vocab();

  // One allocation for all of this rank's weights, carved in layout order.
  const std::int64_t per_layer = 2 * h + qkv_rows * h + (c.qkv_bias ? qkv_rows : 0) +
                                 (c.qk_norm ? 2 * d : 0) + h * q_rows + (c.o_bias ? h : 0) +
                                 3 * inter * h;
  const std::uint64_t total_elems = static_cast<std::uint64_t>(
      vocab * h + c.num_layers * per_layer + h + (c.tie_word_embeddings ? 0 : vocab * h));
  const std::size_t elem = dtype_size(dt);
  VPOD_ASSIGN_OR_RETURN(auto buffer, backend_.allocate(total_elems * elem));
  auto* base = static_cast<std::uint8_t*>(buffer->data());
  weight_bytes_ = buffer->bytes();
  buffers_.push_back(std::move(buffer));
  std::uint64_t cursor = 0;
  auto carve = [&](std::initializer_list<std::int64_t> shape) {
    std::uint64_t n = 1;
    for (auto dim : shape) n *= static_cast<std::uint64_t>(dim);
    TensorView v(base + cursor * elem, dt, shape, backend_.device());
    cursor += n;
    return v;
  };
  Progress progress(total_elems * elem);
  std::vector<std::uint8_t> scratch;  // generated values (--load-format dummy)
  // Rows [row0, row0 + rows) of tensor `name` ([R, C], or [R] with C = 1)
  // into `dst` at element `offset`: one contiguous run of the file, in
  // pieces of at most kPiece elements (bounds the host memory a generated
  // source fills).
  constexpr std::int64_t kPiece = std::int64_t{1} << 26;
  auto put_rows = [&](const std::string& name, const TensorView& dst, std::int64_t offset,
                      std::int64_t row0, std::int64_t rows) -> Status {
    const std::vector<std::int64_t>& shape = source.shape(name);
    const std::int64_t cols = shape.size() > 1 ? shape[1] : 1;
    VPOD_CHECK(row0 >= 0 && row0 + rows <= shape[0]);
    const std::int64_t numel = rows * cols;
    VPOD_CHECK(offset + numel <= dst.numel());
    for (std::int64_t done = 0; done < numel;) {
      const std::int64_t n = std::min(kPiece, numel - done);
      const std::uint8_t* src = source.read(name, row0 * cols + done, n, scratch);
      auto* p = static_cast<std::uint8_t*>(dst.data()) + (offset + done) * elem;
      VPOD_RETURN_IF_ERROR(backend_.upload(src, source.dtype(name), n, p, dt));
      progress.add(static_cast<std::uint64_t>(n) * elem);
      done += n;
    }
    return {};
  };
  auto put = [&](const std::string& name, const TensorView& dst, std::int64_t offset) {
    return put_rows(name, dst, offset, 0, source.shape(name)[0]);
  };
  // Columns [col0, col0 + cols) of every row of tensor `name` [R, C]:
  // gathered on the host, uploaded once.
  std::vector<std::uint8_t> staging;
  auto put_cols = [&](const std::string& name, const TensorView& dst, std::int64_t col0,
                      std::int64_t cols) -> Status {
    const std::vector<std::int64_t>& shape = source.shape(name);
    VPOD_CHECK(shape.size() == 2 && col0 >= 0 && col0 + cols <= shape[1]);
    if (cols == shape[1]) return put(name, dst, 0);
    const std::int64_t rows = shape[0];
    const DType src_dtype = source.dtype(name);
    const std::size_t run = static_cast<std::size_t>(cols) * dtype_size(src_dtype);
    staging.resize(static_cast<std::size_t>(rows) * run);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::memcpy(staging.data() + r * run, source.read(name, r * shape[1] + col0, cols, scratch),
                  run);
    }
    VPOD_CHECK(rows * cols <= dst.numel());
    VPOD_RETURN_IF_ERROR(backend_.upload(staging.data(), src_dtype, rows * cols, dst.data(), dt));
    progress.add(static_cast<std::uint64_t>(rows * cols) * elem);
    return {};
  };

  embed_ = carve({vocab, h});
  VPOD_RETURN_IF_ERROR(put_rows("model.embed_tokens.weight", embed_, 0, vocab0, vocab));
  layers_.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& w = layers_[l];
    auto name = [&](const char* suffix) { return layer_weight_name(l, suffix); };
    w.input_norm = carve({h});
    VPOD_RETURN_IF_ERROR(put(name("input_layernorm.weight"), w.input_norm, 0));
    // Column-parallel QKV: this rank's q heads, then its k and v heads.
    w.qkv = carve({qkv_rows, h});
    VPOD_RETURN_IF_ERROR(put_rows(name("self_attn.q_proj.weight"), w.qkv, 0, q_row0, q_rows));
    VPOD_RETURN_IF_ERROR(
        put_rows(name("self_attn.k_proj.weight"), w.qkv, q_rows * h, kv_row0, kv_rows));
    VPOD_RETURN_IF_ERROR(
        put_rows(name("self_attn.v_proj.weight"), w.qkv, (q_rows + kv_rows) * h, kv_row0, kv_rows));
    if (c.qkv_bias) {
      w.qkv_bias = carve({qkv_rows});
      VPOD_RETURN_IF_ERROR(put_rows(name("self_attn.q_proj.bias"), w.qkv_bias, 0, q_row0, q_rows));
      VPOD_RETURN_IF_ERROR(
          put_rows(name("self_attn.k_proj.bias"), w.qkv_bias, q_rows, kv_row0, kv_rows));
      VPOD_RETURN_IF_ERROR(
          put_rows(name("self_attn.v_proj.bias"), w.qkv_bias, q_rows + kv_rows, kv_row0, kv_rows));
    }
    if (c.qk_norm) {
      w.q_norm = carve({d});
      w.k_norm = carve({d});
      VPOD_RETURN_IF_ERROR(put(name("self_attn.q_norm.weight"), w.q_norm, 0));
      VPOD_RETURN_IF_ERROR(put(name("self_attn.k_norm.weight"), w.k_norm, 0));
    }
    // Row-parallel o_proj: the input columns of this rank's q heads.
    w.o = carve({h, q_rows});
    VPOD_RETURN_IF_ERROR(put_cols(name("self_attn.o_proj.weight"), w.o, q_row0, q_rows));
    if (c.o_bias) {
      w.o_bias = carve({h});
      VPOD_RETURN_IF_ERROR(put(name("self_attn.o_proj.bias"), w.o_bias, 0));
    }
    w.post_norm = carve({h});
    VPOD_RETURN_IF_ERROR(put(name("post_attention_layernorm.weight"), w.post_norm, 0));
    // Column-parallel gate/up (this rank's intermediate rows of each),
    // row-parallel down (the same columns).
    w.gate_up = carve({2 * inter, h});
    VPOD_RETURN_IF_ERROR(put_rows(name("mlp.gate_proj.weight"), w.gate_up, 0, inter0, inter));
    VPOD_RETURN_IF_ERROR(put_rows(name("mlp.up_proj.weight"), w.gate_up, inter * h, inter0, inter));
    w.down = carve({h, inter});
    VPOD_RETURN_IF_ERROR(put_cols(name("mlp.down_proj.weight"), w.down, inter0, inter));
  }
  final_norm_ = carve({h});
  VPOD_RETURN_IF_ERROR(put("model.norm.weight", final_norm_, 0));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    lm_head_ = carve({vocab, h});
    VPOD_RETURN_IF_ERROR(put_rows("lm_head.weight", lm_head_, 0, vocab0, vocab));
  }
  VPOD_CHECK(cursor == total_elems);

  inv_freq_host_ = kernels::rope_inv_freq(rope_params(c.rope), c.head_dim);
  VPOD_ASSIGN_OR_RETURN(TensorView inv, alloc_tensor(DType::f32, {c.head_dim / 2}));
  VPOD_RETURN_IF_ERROR(
      backend_.upload(inv_freq_host_.data(), DType::f32, c.head_dim / 2, inv.data(), DType::f32));
  rope_ = {static_cast<const float*>(inv.data()), c.head_dim};
  return backend_.synchronize();
}

}  // namespace vpod::model
