// The composition root (engine::EngineStack) on the CPU backend with the tiny
// model: every KV mode it builds serves the same greedy tokens, options the
// backend cannot honour are refused with the reason, a stack without a
// tokenizer streams ids only, and the logits observer sees each sampled row.
#include "engine/engine_stack.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/make_model.h"
#include "model/model.h"

namespace vpod::engine {
namespace {

namespace fs = std::filesystem;

class EngineStackTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (model::find_fixtures_dir().empty()) {
      skip_reason_ = "no tokenizer fixtures (set VPOD_FIXTURES)";
      return;
    }
    dir_ = fs::temp_directory_path() / ("vpod_engine_stack_" + std::to_string(::getpid()));
    model::MakeModelOptions options;
    options.out_dir = dir_;
    options.preset = "tiny";
    options.seed = 11;
    options.num_threads = 2;
    const auto made = model::make_model(options);
    if (!made.ok()) skip_reason_ = "making the tiny model failed: " + made.status().to_string();
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (skip_reason_.rfind("making", 0) == 0) FAIL() << skip_reason_;
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  static StackOptions options() {
    StackOptions o;
    o.model_dir = dir_;
    o.device = DeviceRequest::cpu;
    o.cpu_threads = 2;
    o.max_model_len = 128;
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = 32;
    return o;
  }

  // Greedy tokens of one request (the prompt spans two prefill chunks).
  static std::vector<std::int32_t> greedy(EngineStack& stack, std::string* text = nullptr,
                                          std::vector<kernels::LogitBias> bias = {},
                                          std::vector<float>* logprobs = nullptr) {
    RequestSpec spec;
    for (int i = 0; i < 40; ++i) spec.prompt_token_ids.push_back(100 + 7 * i);
    spec.sampling.temperature = 0.0f;
    spec.sampling.logit_bias = std::move(bias);
    if (logprobs != nullptr) spec.sampling.logprobs = 0;
    spec.stop.max_tokens = 12;
    spec.stop.ignore_eos = true;
    auto stream = stack.engine().submit(std::move(spec));
    EXPECT_TRUE(stream.ok()) << stream.status().to_string();
    std::vector<std::int32_t> tokens;
    RequestOutput out;
    for (bool finished = false; !finished;) {
      if (!(*stream)->pop(out, std::chrono::milliseconds(1000))) continue;
      tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
      if (logprobs != nullptr) {
        for (const SampledToken& t : out.logprobs) logprobs->push_back(t.logprob);
      }
      if (text != nullptr) *text += out.text;
      finished = out.finished;
    }
    EXPECT_EQ(out.finish_reason, FinishReason::length) << out.error;
    return tokens;
  }

  static inline fs::path dir_;
  static inline std::string skip_reason_;
};

TEST_F(EngineStackTest, EveryKvModeServesTheSameGreedyTokens) {
  auto reference_stack = EngineStack::build(options());
  ASSERT_TRUE(reference_stack.ok()) << reference_stack.status().to_string();
  EXPECT_NE((*reference_stack)->summary().find("vattn all-layers"), std::string::npos)
      << (*reference_stack)->summary();
  std::string text;
  const std::vector<std::int32_t> reference = greedy(**reference_stack, &text);
  EXPECT_EQ(reference.size(), 12u);
  EXPECT_FALSE(text.empty());
  reference_stack->reset();

  struct Mode {
    KvCacheKind kv_cache;
    kvcache::KvLayout layout;
    bool async;
    const char* summary;
    std::optional<int> block_size;
  };
  for (const Mode& m :
       {Mode{KvCacheKind::vattn, kvcache::KvLayout::per_layer, false, "per-layer", {}},
        Mode{KvCacheKind::paged, kvcache::KvLayout::all_layers, true, "paged, 16-token blocks", {}},
        Mode{KvCacheKind::paged, kvcache::KvLayout::all_layers, true, "paged, 1-token blocks", 1},
        Mode{KvCacheKind::paged, kvcache::KvLayout::all_layers, false, "paged, 64-token blocks",
             64}}) {
    StackOptions o = options();
    o.kv_cache = m.kv_cache;
    o.kv_layout = m.layout;
    o.async_scheduling = m.async;
    o.block_size = m.block_size;
    o.kv_cache_memory_bytes = std::size_t{4} << 20;
    auto stack = EngineStack::build(o);
    ASSERT_TRUE(stack.ok()) << stack.status().to_string();
    EXPECT_NE((*stack)->summary().find(m.summary), std::string::npos) << (*stack)->summary();
    EXPECT_EQ(greedy(**stack), reference) << (*stack)->summary();
  }
}

TEST_F(EngineStackTest, RefusesWhatTheBackendOrTheModelCannotDo) {
  StackOptions pod = options();
  pod.attention = AttentionChoice::pod;
  auto refused = EngineStack::build(pod);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::unimplemented);
  EXPECT_NE(refused.status().message().find("--attention pod needs the CUDA backend"),
            std::string::npos)
      << refused.status().to_string();

  // --block-size: the paged baseline's only, and FlashInfer's page sizes.
  StackOptions vattn_blocks = options();
  vattn_blocks.block_size = 16;
  auto no_blocks = EngineStack::build(vattn_blocks);
  ASSERT_FALSE(no_blocks.ok());
  EXPECT_NE(no_blocks.status().message().find("--block-size applies to --kv-cache paged"),
            std::string::npos)
      << no_blocks.status().to_string();
  for (int bad : {0, 8, 128, -16}) {
    StackOptions paged = options();
    paged.kv_cache = KvCacheKind::paged;
    paged.block_size = bad;
    auto refused_size = EngineStack::build(paged);
    ASSERT_FALSE(refused_size.ok()) << bad;
    EXPECT_EQ(refused_size.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(refused_size.status().message().find("--block-size must be 1, 16, 32 or 64"),
              std::string::npos)
        << refused_size.status().to_string();
  }

  StackOptions no_seqs = options();
  no_seqs.max_num_seqs = 0;
  EXPECT_EQ(EngineStack::build(no_seqs).status().code(), StatusCode::invalid_argument);

  StackOptions too_long = options();
  too_long.max_model_len = 1 << 30;
  auto long_refused = EngineStack::build(too_long);
  ASSERT_FALSE(long_refused.ok());
  EXPECT_NE(long_refused.status().message().find("exceeds the model's context"), std::string::npos)
      << long_refused.status().to_string();
}

TEST_F(EngineStackTest, WithoutATokenizerStreamsIdsOnlyAndShowsTheLogits) {
  StackOptions o = options();
  o.load_tokenizer = false;
  int num_rows = 0, num_argmax_equal = 0;
  std::vector<std::int32_t> argmax;
  const model::Model* model = nullptr;
  o.logits_observer = [&](const TensorView& logits, std::span<const SampleSpec> samples) {
    // CPU backend: the logits are in host memory, [num_sequences, vocab].
    const int vocab = model->config().vocab_size;
    for (const SampleSpec& s : samples) {
      const float* row = static_cast<const float*>(logits.data()) +
                         static_cast<std::size_t>(s.sequence_index) * vocab;
      argmax.push_back(static_cast<std::int32_t>(std::max_element(row, row + vocab) - row));
      ++num_rows;
    }
    return Status{};
  };
  o.async_scheduling = false;  // the observer runs on the engine thread
  auto stack = EngineStack::build(o);
  ASSERT_TRUE(stack.ok()) << stack.status().to_string();
  model = &(*stack)->model();
  EXPECT_EQ((*stack)->tokenizer(), nullptr);
  std::string text;
  const std::vector<std::int32_t> tokens = greedy(**stack, &text);
  EXPECT_TRUE(text.empty());
  ASSERT_EQ(num_rows, 12);  // one sampled row per generated token
  for (int i = 0; i < num_rows; ++i) num_argmax_equal += argmax[i] == tokens[i];
  EXPECT_EQ(num_argmax_equal, 12);  // greedy picks each row's largest logit
}

// logit_bias through the real CPU sampler: +100 forces a token on every
// step, -100 on the greedy choices bans them, and logprobs are those of the
// biased distribution (the forced token's is ~0).
TEST_F(EngineStackTest, LogitBiasForcesAndBansTokens) {
  auto stack = EngineStack::build(options());
  ASSERT_TRUE(stack.ok()) << stack.status().to_string();
  const std::vector<std::int32_t> plain = greedy(**stack);
  ASSERT_EQ(plain.size(), 12u);
  std::int32_t forced = 3;
  while (std::find(plain.begin(), plain.end(), forced) != plain.end()) ++forced;
  std::vector<float> logprobs;
  const std::vector<std::int32_t> all_forced =
      greedy(**stack, nullptr, {{forced, 100.0f}}, &logprobs);
  EXPECT_EQ(all_forced, std::vector<std::int32_t>(12, forced));
  ASSERT_EQ(logprobs.size(), 12u);
  for (float lp : logprobs) EXPECT_GT(lp, -1e-3f);

  std::vector<kernels::LogitBias> ban;
  for (std::int32_t t : plain) {
    if (std::none_of(ban.begin(), ban.end(), [&](const auto& b) { return b.token == t; }))
      ban.push_back({t, -100.0f});
  }
  const std::vector<std::int32_t> banned = greedy(**stack, nullptr, ban);
  ASSERT_EQ(banned.size(), 12u);
  for (std::int32_t t : banned)
    EXPECT_EQ(std::find(plain.begin(), plain.end(), t), plain.end()) << "banned token " << t;

  // The engine refuses an id outside the vocabulary and a bias out of range.
  const int vocab = (*stack)->model().config().vocab_size;
  for (const kernels::LogitBias& bad :
       {kernels::LogitBias{vocab, 1.0f}, kernels::LogitBias{-1, 1.0f},
        kernels::LogitBias{5, 101.0f}}) {
    RequestSpec spec;
    spec.prompt_token_ids = {1, 2, 3};
    spec.sampling.logit_bias = {bad};
    auto refused = (*stack)->engine().submit(std::move(spec));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(refused.status().message().find("logit_bias"), std::string::npos)
        << refused.status().to_string();
  }
}

// The prefix cache's model salt names the config's bytes and the KV dtype.
TEST(ModelPrefixSalt, NamesTheConfigAndTheKvDtype) {
  const fs::path root =
      fs::temp_directory_path() / ("vpod_prefix_salt_" + std::to_string(::getpid()));
  const auto write = [&](const std::string& name, const std::string& config) {
    fs::create_directories(root / name);
    std::ofstream(root / name / "config.json") << config;
    return root / name;
  };
  const fs::path a = write("a", R"({"hidden_size": 64})");
  const fs::path a_copy = write("a_copy", R"({"hidden_size": 64})");
  const fs::path b = write("b", R"({"hidden_size": 65})");
  const std::uint64_t salt = *model_prefix_salt(a, DType::bf16);
  EXPECT_EQ(*model_prefix_salt(a_copy, DType::bf16), salt);
  EXPECT_NE(*model_prefix_salt(b, DType::bf16), salt);
  EXPECT_NE(*model_prefix_salt(a, DType::f16), salt);
  EXPECT_EQ(model_prefix_salt(root / "missing", DType::bf16).status().code(),
            StatusCode::not_found);
  fs::remove_all(root);
}

TEST(StackFlags, NamesParseBack) {
  for (DeviceRequest d : {DeviceRequest::automatic, DeviceRequest::cuda, DeviceRequest::cpu})
    EXPECT_EQ(*parse_device_request(device_request_name(d)), d);
  for (KvCacheKind k : {KvCacheKind::vattn, KvCacheKind::paged})
    EXPECT_EQ(*parse_kv_cache_kind(kv_cache_kind_name(k)), k);
  for (AttentionChoice a : {AttentionChoice::serial, AttentionChoice::simple, AttentionChoice::pod})
    EXPECT_EQ(*parse_attention_choice(attention_choice_name(a)), a);
  EXPECT_EQ(parse_device_request("gpu").status().message(), "must be auto, cuda or cpu, got 'gpu'");
  EXPECT_FALSE(parse_kv_cache_kind("vAttention").ok());
  EXPECT_FALSE(parse_attention_choice("kernels").ok());
}

}  // namespace
}  // namespace vpod::engine
