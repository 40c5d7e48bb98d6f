// Where the model plans a step's attention (model.cpp): an eager step through
// the unfused layer loop plans after enqueueing the embedding and layer 0's
// norm and QKV projection (the GPU runs them while the host plans), a step
// that may run as a graph or through the fused decode ops plans first. A
// planning failure returns its error before anything is written to the KV
// cache, and the next step runs normally. The backend here is the real CPU
// backend behind a decorator that records the op sequence and can make
// plan_attention fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kv_buffers.h"
#include "model/model.h"
#include "temp_model_dir.h"

namespace vpod::model {
namespace {

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::vector<std::string> ops;
  bool fail_plan = false;
  bool fail_attention = false;  // attention returns an error, as a failed launch would

  void set_op_timing(bool enabled) override { inner_->set_op_timing(enabled); }
  OpTimes take_op_times() override { return inner_->take_op_times(); }
  Device device() const override { return inner_->device(); }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  std::string description() const override { return "recording " + inner_->description(); }
  Result<std::unique_ptr<BackendBuffer>> allocate(std::size_t bytes) override {
    return inner_->allocate(bytes);
  }
  Status upload(const void* src, DType src_dtype, std::int64_t numel, void* dst,
                DType dst_dtype) override {
    return inner_->upload(src, src_dtype, numel, dst, dst_dtype);
  }
  Status download(const void* src, std::size_t bytes, void* dst) override {
    return inner_->download(src, bytes, dst);
  }
  Status synchronize() override { return inner_->synchronize(); }
  Status reserve_step(int max_tokens, int max_sequences) override {
    return inner_->reserve_step(max_tokens, max_sequences);
  }
  Status prepare_step(const StepArrays& arrays, const HybridBatch& batch,
                      StepTensors* out) override {
    ops.push_back("prepare_step");
    return inner_->prepare_step(arrays, batch, out);
  }
  Status plan_attention(const StepTensors& step, int num_q_heads, int num_kv_heads, int head_dim,
                        const PagedKvView* paged_kv, StepPlan& plan) override {
    ops.push_back("plan_attention");
    if (fail_plan) return resource_exhausted("planning failed on purpose (test)");
    return inner_->plan_attention(step, num_q_heads, num_kv_heads, head_dim, paged_kv, plan);
  }
  Result<StepGraph> try_step_graph(const StepTensors& step, const StepPlan& plan,
                                   std::uint64_t caller_key) override {
    return inner_->try_step_graph(step, plan, caller_key);
  }
  void embedding(const TensorView& table, std::int64_t first_id, const StepTensors& step,
                 const TensorView& out) override {
    ops.push_back("embedding");
    inner_->embedding(table, first_id, step, out);
  }
  void rms_norm(const TensorView& x, const TensorView& weight, float eps,
                const TensorView& out) override {
    ops.push_back("rms_norm");
    inner_->rms_norm(x, weight, eps, out);
  }
  void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& weight,
                    float eps, const TensorView& out) override {
    ops.push_back("add_rms_norm");
    inner_->add_rms_norm(residual, delta, weight, eps, out);
  }
  Status linear(const TensorView& x, const TensorView& weight, const TensorView* bias,
                const TensorView& out) override {
    ops.push_back("linear");
    return inner_->linear(x, weight, bias, out);
  }
  void head_rms_norm(const TensorView& x, const TensorView& weight, float eps) override {
    ops.push_back("head_rms_norm");
    inner_->head_rms_norm(x, weight, eps);
  }
  void rope_kv_append(const TensorView& q, const TensorView& k, const TensorView& v,
                      const RopeTable& rope, const StepTensors& step, const KvCacheView& kv,
                      int layer) override {
    ops.push_back("rope_kv_append");
    inner_->rope_kv_append(q, k, v, rope, step, kv, layer);
  }
  Status attention(const TensorView& q, const KvCacheView& kv, int layer, const StepTensors& step,
                   const StepPlan& plan, float scale, const TensorView& out) override {
    ops.push_back("attention");
    if (fail_attention) return internal_error("attention launch failed on purpose (test)");
    return inner_->attention(q, kv, layer, step, plan, scale, out);
  }
  bool supports_paged_kv(int head_dim) const override {
    return inner_->supports_paged_kv(head_dim);
  }
  std::string paged_attention_description() const override {
    return inner_->paged_attention_description();
  }
  void silu_mul(const TensorView& gate_up, const TensorView& out) override {
    ops.push_back("silu_mul");
    inner_->silu_mul(gate_up, out);
  }
  void gather_rows(const TensorView& x, const StepTensors& step, const TensorView& out) override {
    ops.push_back("gather_rows");
    inner_->gather_rows(x, step, out);
  }
  bool fused_decode(int num_tokens, int hidden_size) const override {
    return inner_->fused_decode(num_tokens, hidden_size);
  }
  void norm_linear(const NormedRows& in, const TensorView& weight, const TensorView* bias,
                   const TensorView& out) override {
    ops.push_back("norm_linear");
    inner_->norm_linear(in, weight, bias, out);
  }
  void norm_linear_silu(const NormedRows& in, const TensorView& gate_up,
                        const TensorView& out) override {
    ops.push_back("norm_linear_silu");
    inner_->norm_linear_silu(in, gate_up, out);
  }
  void set_decode_tuning(const DecodeTuning& tuning) override { inner_->set_decode_tuning(tuning); }
  DecodeTuning decode_tuning() const override { return inner_->decode_tuning(); }
  Status sample(const TensorView& logits, std::span<const kernels::SampleRequest> requests,
                std::span<kernels::SampleResult> out) override {
    return inner_->sample(logits, requests, out);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

// Position of the first `op` in `ops` (ops.size() when absent).
std::size_t first(const std::vector<std::string>& ops, const std::string& op) {
  return static_cast<std::size_t>(std::find(ops.begin(), ops.end(), op) - ops.begin());
}

HybridBatch prefill_batch(int slot, int n) {
  HybridBatch b;
  b.prefills.push_back({.slot = slot, .cached_len = 0, .num_new = n, .token_offset = 0});
  for (int i = 0; i < n; ++i) {
    b.token_ids.push_back(3 + 7 * i);
    b.positions.push_back(i);
  }
  return b;
}

HybridBatch decode_batch(int slot, int context) {
  HybridBatch b;
  b.decodes.push_back({.slot = slot, .cached_len = context, .num_new = 1, .token_offset = 0});
  b.token_ids.push_back(11);
  b.positions.push_back(context);
  return b;
}

class PlanOrder : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.status().ok()) << dir_.status().to_string();
    auto backend = std::make_unique<RecordingBackend>(make_cpu_backend(2));
    backend_ = backend.get();
    owned_ = std::move(backend);
    auto model = Model::load(dir_.path(), *owned_, {.max_num_tokens = 32, .max_num_sequences = 4});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(model).value();
    auto kv = KvCacheBuffers::create(*owned_, model_->config(), model_->kv_dtype(), 2, 32);
    ASSERT_TRUE(kv.ok());
    kv_ = std::make_unique<KvCacheBuffers>(std::move(kv).value());
  }

  // The cache's bytes, every layer's K and V (host memory on the CPU backend).
  std::vector<unsigned char> cache_bytes() const {
    std::vector<unsigned char> out;
    for (const KvLayerView& v : kv_->views()) {
      const std::size_t n =
          static_cast<std::size_t>(v.num_slots) * v.slot_stride * dtype_size(v.dtype);
      for (const void* p : {v.k, v.v}) {
        const auto* b = static_cast<const unsigned char*>(p);
        out.insert(out.end(), b, b + n);
      }
    }
    return out;
  }

  const testing::TempModelDir dir_{"tiny", 5};
  std::unique_ptr<Backend> owned_;
  RecordingBackend* backend_ = nullptr;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCacheBuffers> kv_;
  StepPlan plan_;  // the step's attention plan, reused step after step
};

TEST_F(PlanOrder, AnEagerStepPlansAfterLayerZerosQkvProjection) {
  ASSERT_TRUE(model_->forward(prefill_batch(0, 5), kv_->view(), plan_).ok());
  const auto& ops = backend_->ops;
  const std::size_t plan = first(ops, "plan_attention");
  ASSERT_LT(plan, ops.size());
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "plan_attention"), 1);
  EXPECT_LT(first(ops, "embedding"), plan);
  EXPECT_LT(first(ops, "rms_norm"), plan);
  EXPECT_LT(first(ops, "linear"), plan);  // layer 0's QKV projection
  EXPECT_GT(first(ops, "rope_kv_append"), plan);
  EXPECT_GT(first(ops, "attention"), plan);
}

TEST_F(PlanOrder, GraphAndFusedDecodeStepsPlanFirst) {
  ASSERT_TRUE(model_->forward(prefill_batch(0, 5), kv_->view(), plan_).ok());
  // A decode-only step may run as a graph (the capture replays the plan).
  backend_->ops.clear();
  ASSERT_TRUE(model_->forward(decode_batch(0, 5), kv_->view(), plan_).ok());
  EXPECT_LT(first(backend_->ops, "plan_attention"), first(backend_->ops, "embedding"));
  // The fused decode ops: planned first too, with graphs off.
  model_->set_step_graphs(false);
  backend_->set_decode_tuning({.fuse = true});
  ASSERT_TRUE(backend_->fused_decode(1, model_->config().hidden_size));
  backend_->ops.clear();
  ASSERT_TRUE(model_->forward(decode_batch(0, 6), kv_->view(), plan_).ok());
  EXPECT_LT(first(backend_->ops, "plan_attention"), first(backend_->ops, "embedding"));
  EXPECT_LT(first(backend_->ops, "norm_linear"), backend_->ops.size());
  // Unfused and not graphable: planned late.
  backend_->set_decode_tuning({.fuse = false});
  backend_->ops.clear();
  ASSERT_TRUE(model_->forward(decode_batch(0, 7), kv_->view(), plan_).ok());
  EXPECT_LT(first(backend_->ops, "linear"), first(backend_->ops, "plan_attention"));
}

TEST_F(PlanOrder, APlanningFailureLeavesTheCacheUntouchedAndTheNextStepRuns) {
  ASSERT_TRUE(model_->forward(prefill_batch(0, 5), kv_->view(), plan_).ok());
  const std::vector<unsigned char> before = cache_bytes();
  backend_->fail_plan = true;
  backend_->ops.clear();
  const auto failed = model_->forward(prefill_batch(1, 4), kv_->view(), plan_);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::resource_exhausted);
  EXPECT_NE(failed.status().message().find("planning failed on purpose"), std::string::npos);
  EXPECT_EQ(first(backend_->ops, "rope_kv_append"), backend_->ops.size());
  EXPECT_EQ(first(backend_->ops, "attention"), backend_->ops.size());
  EXPECT_TRUE(cache_bytes() == before) << "a failed step wrote to the KV cache";

  // The same step once planning works again: the logits of a fresh model.
  backend_->fail_plan = false;
  const auto again = model_->forward(prefill_batch(1, 4), kv_->view(), plan_);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  const auto* p = static_cast<const float*>(again->data());
  const std::vector<float> got(p, p + again->numel());
  auto fresh_backend = make_cpu_backend(2);
  auto fresh =
      Model::load(dir_.path(), *fresh_backend, {.max_num_tokens = 32, .max_num_sequences = 4});
  ASSERT_TRUE(fresh.ok());
  auto fresh_kv =
      KvCacheBuffers::create(*fresh_backend, (*fresh)->config(), (*fresh)->kv_dtype(), 2, 32);
  ASSERT_TRUE(fresh_kv.ok());
  StepPlan fresh_plan;
  const auto want = (*fresh)->forward(prefill_batch(1, 4), fresh_kv->view(), fresh_plan);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(want->numel(), again->numel());
  EXPECT_EQ(std::memcmp(want->data(), again->data(), got.size() * sizeof(float)), 0);
}

// A backend op that fails (a launcher's Status) is returned by forward, not
// an abort; the next step runs normally.
TEST_F(PlanOrder, AFailedOpReturnsItsStatus) {
  backend_->fail_attention = true;
  const auto failed = model_->forward(prefill_batch(0, 5), kv_->view(), plan_);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::internal);
  EXPECT_NE(failed.status().message().find("attention launch failed"), std::string::npos);
  EXPECT_EQ(std::count(backend_->ops.begin(), backend_->ops.end(), "attention"), 1);
  backend_->fail_attention = false;
  EXPECT_TRUE(model_->forward(prefill_batch(0, 5), kv_->view(), plan_).ok());
}

}  // namespace
}  // namespace vpod::model
