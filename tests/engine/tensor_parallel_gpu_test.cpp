// Tensor parallelism on GPUs (--tensor-parallel-size 2: one thread, CUDA
// backend, NCCL communicator and vAttention cache per GPU): the engine's
// greedy tokens at TP = 2 equal TP = 1's in fp32 (the all-reduces change
// only the order of fp32 additions), and a bf16 run with step graphs (NCCL
// captured inside them) serves every request to its length. Skips, saying
// so, with fewer than 2 GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <vector>

#include "engine/engine_stack.h"
#include "model/temp_model_dir.h"
#include "support/gpu.h"

namespace vpod::engine {
namespace {

StackOptions options(const std::filesystem::path& dir, int tp, DType dtype) {
  StackOptions o;
  o.model_dir = dir;
  o.device = DeviceRequest::cuda;
  o.dtype = dtype;
  o.max_model_len = 512;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 256;
  o.kv_cache_memory_bytes = std::size_t{256} << 20;
  o.load_tokenizer = false;
  o.tensor_parallel_size = tp;
  return o;
}

std::map<int, std::vector<std::int32_t>> serve_all(EngineStack& stack, int max_tokens) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 6; ++r) {
    RequestSpec spec;
    for (int i = 0; i < 20 + 53 * r; ++i) spec.prompt_token_ids.push_back(500 + 31 * i + 13 * r);
    spec.sampling.temperature = 0.0f;
    spec.stop.max_tokens = max_tokens;
    spec.stop.ignore_eos = true;
    auto stream = stack.engine().submit(std::move(spec));
    EXPECT_TRUE(stream.ok()) << stream.status().to_string();
    if (stream.ok()) streams.push_back(*stream);
  }
  std::map<int, std::vector<std::int32_t>> tokens;
  for (std::size_t r = 0; r < streams.size(); ++r) {
    RequestOutput out;
    for (bool finished = false; !finished;) {
      if (!streams[r]->pop(out, std::chrono::milliseconds(1000))) continue;
      auto& t = tokens[static_cast<int>(r)];
      t.insert(t.end(), out.token_ids.begin(), out.token_ids.end());
      finished = out.finished;
    }
    EXPECT_EQ(out.finish_reason, FinishReason::length) << "request " << r << ": " << out.error;
  }
  return tokens;
}

TEST(TensorParallelGpu, TwoGpusServeTheSameGreedyTokensAsOne) {
  VPOD_REQUIRE_GPU();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    GTEST_SKIP() << "tensor parallelism needs 2 GPUs, " << devices << " found";
  }
  // 8 q heads and 2 KV heads (one per GPU), head_dim 128, 4 layers.
  const model::testing::TempModelDir dir("test-llama3", 5);
  ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();

  auto whole = EngineStack::build(options(dir.path(), 1, DType::f32));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const auto reference = serve_all(**whole, 24);
  whole->reset();
  auto split = EngineStack::build(options(dir.path(), 2, DType::f32));
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  EXPECT_NE((*split)->summary().find("tensor parallel x2 over nccl"), std::string::npos)
      << (*split)->summary();
  EXPECT_EQ(serve_all(**split, 24), reference);
  split->reset();

  auto bf16 = EngineStack::build(options(dir.path(), 2, DType::bf16));
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  const auto tokens = serve_all(**bf16, 48);
  ASSERT_EQ(tokens.size(), 6u);
  for (const auto& [r, t] : tokens) EXPECT_EQ(t.size(), 48u) << "request " << r;
}

}  // namespace
}  // namespace vpod::engine
