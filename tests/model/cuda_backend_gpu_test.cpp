// The CUDA backend against transformers' goldens (fp32) and against the CPU
// backend and its own simple attention (bf16, head_dim 128, the attention
// folder's kernels) on hybrid batches.
#include <gtest/gtest.h>

#include "model/golden_support.h"
#include "support/gpu.h"

#include <random>

namespace vpod::model {
namespace {

// fp32 on the GPU (cuBLASLt without TF32, the simple attention) differs from
// transformers on the CPU only by summation order.
constexpr float kGpuFp32Tolerance = 5e-4f;

class CudaGoldenTest : public ::testing::TestWithParam<int> {};

TEST_P(CudaGoldenTest, Fp32MatchesTransformers) {
  VPOD_REQUIRE_GPU();
  const auto goldens = testing::load_goldens();
  auto backend = make_cuda_backend({.dtype = DType::f32});
  ASSERT_TRUE(backend.ok()) << backend.status().to_string();
  testing::run_golden_case(goldens["cases"][GetParam()], **backend, kGpuFp32Tolerance);
}

std::string case_name(const ::testing::TestParamInfo<int>& info) {
  const char* names[] = {"tiny_llama3", "tiny_qwen2", "tiny_qwen3"};
  return names[info.param];
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaGoldenTest, ::testing::Values(0, 1, 2), case_name);

// A hybrid batch: two prefill chunks (one continuing a cached prefix) and
// three decodes over contexts of different lengths.
struct HybridScenario {
  std::vector<HybridBatch> steps;
};

HybridScenario make_scenario(int vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  HybridScenario s;
  // Step 1: prefill slots 0..4 with prompts of different lengths.
  const int lens[] = {37, 70, 5, 129, 64};
  HybridBatch b;
  int offset = 0;
  for (int slot = 0; slot < 5; ++slot) {
    b.prefills.push_back(
        {.slot = slot, .cached_len = 0, .num_new = lens[slot], .token_offset = offset});
    for (int i = 0; i < lens[slot]; ++i) {
      b.token_ids.push_back(tok(rng));
      b.positions.push_back(i);
    }
    offset += lens[slot];
  }
  s.steps.push_back(b);
  // Step 2: chunk of 40 continuing slot 1 and 17 continuing slot 3, decodes of 0, 2, 4.
  HybridBatch h;
  offset = 0;
  auto add_prefill = [&](int slot, int cached, int n) {
    h.prefills.push_back(
        {.slot = slot, .cached_len = cached, .num_new = n, .token_offset = offset});
    for (int i = 0; i < n; ++i) {
      h.token_ids.push_back(tok(rng));
      h.positions.push_back(cached + i);
    }
    offset += n;
  };
  add_prefill(1, 70, 40);
  add_prefill(3, 129, 17);
  for (int slot : {0, 2, 4}) {
    h.decodes.push_back(
        {.slot = slot, .cached_len = lens[slot], .num_new = 1, .token_offset = offset});
    h.token_ids.push_back(tok(rng));
    h.positions.push_back(lens[slot]);
    ++offset;
  }
  s.steps.push_back(h);
  return s;
}

// Runs the scenario, returning the last step's per-sequence logits.
std::vector<float> run_scenario(Backend& backend, const std::filesystem::path& dir,
                                std::string* error) {
  auto model = Model::load(dir, backend, {.max_num_tokens = 512, .max_num_sequences = 8});
  if (!model.ok()) {
    *error = model.status().to_string();
    return {};
  }
  auto kv = KvCacheBuffers::create(backend, (*model)->config(), backend.compute_dtype(), 5, 256);
  if (!kv.ok()) {
    *error = kv.status().to_string();
    return {};
  }
  const HybridScenario s = make_scenario((*model)->config().vocab_size);
  std::vector<float> out;
  for (const HybridBatch& b : s.steps) {
    auto logits = (*model)->forward(b, kv->views());
    if (!logits.ok()) {
      *error = logits.status().to_string();
      return {};
    }
    out = testing::download(backend, *logits);
  }
  return out;
}

TEST(CudaBackend, Bf16HybridBatchMatchesCpuAndSimpleAttention) {
  VPOD_REQUIRE_GPU();
  const auto dir =
      std::filesystem::temp_directory_path() / ("vpod_test_llama3_" + std::to_string(::getpid()));
  MakeModelOptions o;
  o.out_dir = dir;
  o.preset = "test-llama3";
  o.seed = 3;
  o.with_tokenizer = false;
  ASSERT_TRUE(make_model(o).ok());

  std::string error;
  auto cpu = make_cpu_backend();
  const std::vector<float> ref = run_scenario(*cpu, dir, &error);
  ASSERT_FALSE(ref.empty()) << error;
  auto fast = make_cuda_backend({.dtype = DType::bf16, .attention = AttentionImpl::kernels});
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  const std::vector<float> kernels_out = run_scenario(**fast, dir, &error);
  ASSERT_EQ(kernels_out.size(), ref.size()) << error;
  fast->reset();
  auto simple = make_cuda_backend({.dtype = DType::bf16, .attention = AttentionImpl::simple});
  ASSERT_TRUE(simple.ok());
  const std::vector<float> simple_out = run_scenario(**simple, dir, &error);
  ASSERT_EQ(simple_out.size(), ref.size()) << error;

  float max_ref = 0, diff_kernels = 0, diff_simple = 0, diff_pair = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    diff_kernels = std::max(diff_kernels, std::fabs(kernels_out[i] - ref[i]));
    diff_simple = std::max(diff_simple, std::fabs(simple_out[i] - ref[i]));
    diff_pair = std::max(diff_pair, std::fabs(kernels_out[i] - simple_out[i]));
  }
  std::printf(
      "bf16 hybrid batch: max |logit| %.4f, max diff vs cpu fp32: kernels %.5f, simple %.5f; "
      "kernels vs simple %.5f\n",
      max_ref, diff_kernels, diff_simple, diff_pair);
  // bf16 activations over 4 layers: a few percent of the logit range.
  EXPECT_LT(diff_kernels, 0.05f * std::max(1.0f, max_ref));
  EXPECT_LT(diff_simple, 0.05f * std::max(1.0f, max_ref));
  EXPECT_LT(diff_pair, 0.05f * std::max(1.0f, max_ref));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vpod::model
