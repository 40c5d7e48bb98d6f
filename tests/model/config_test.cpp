// config.json and generation_config.json parsing, and the loader's tensor-set
// validation against hostile folders.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kernels/rope/rope.h"
#include "model/make_model.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "model/model_config.h"

namespace vpod::model {
namespace {

namespace fs = std::filesystem;

const char* kLlama3 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu"})";

TEST(ModelConfig, ParsesLlama3) {
  auto c = parse_model_config(kLlama3, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Architecture::llama);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->rope.scaling, RopeScaling::llama3);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->dtype, DType::bf16);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->max_model_len(), 131072);
  EXPECT_EQ(c->num_parameters(), 8030261248);  // Llama-3.1-8B
}

TEST(ModelConfig, ParsesTransformers5RopeParameters) {
  auto c = parse_model_config(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":100,
    "hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,"num_attention_heads":4,
    "num_key_value_heads":1,"head_dim":32,"dtype":"float32",
    "rope_parameters":{"rope_type":"linear","factor":2.0,"rope_theta":1000000.0}})",
                              "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 32);  // override, not 64/4
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->rope.scaling, RopeScaling::linear);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
  EXPECT_EQ(c->dtype, DType::f32);
}

TEST(ModelConfig, RejectsWhatItCannotRun) {
  auto with = [](const std::string& extra) {
    return std::string(R"({"architectures":["LlamaForCausalLM"],"vocab_size":10,"hidden_size":8,
      "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2)") +
           extra + "}";
  };
  auto message = [](const std::string& text) {
    auto c = parse_model_config(text, "config.json");
    return c.ok() ? std::string("ok") : c.status().message();
  };
  EXPECT_NE(message(with(R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0})")).find("'yarn'"),
            std::string::npos);
  EXPECT_NE(message(with(R"(,"rope_scaling":{"type":"dynamic","factor":4.0})")).find("'dynamic'"),
            std::string::npos);
  EXPECT_NE(message(R"({"architectures":["GPT2LMHeadModel"]})").find("GPT2LMHeadModel"),
            std::string::npos);
  EXPECT_NE(message(with(R"(,"hidden_act":"gelu")")).find("gelu"), std::string::npos);
  EXPECT_NE(message(with(R"(,"num_key_value_heads":3)")).find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(message(with(R"(,"torch_dtype":"int8")")).find("torch_dtype"), std::string::npos);
  EXPECT_NE(message(with(R"(,"hidden_size":"8")")).find("hidden_size"), std::string::npos);
  EXPECT_NE(message("not json").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(message(with("")), "ok");
}

TEST(ModelConfig, SlidingWindowLimitsTheContext) {
  const std::string mistral = R"({"architectures":["MistralForCausalLM"],"vocab_size":32000,
    "hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,
    "num_key_value_heads":8,"max_position_embeddings":32768,"sliding_window":4096})";
  auto c = parse_model_config(mistral, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->max_model_len(), 4096);
  // Qwen2 carries a window that is off unless use_sliding_window is true.
  auto q = parse_model_config(R"({"architectures":["Qwen2ForCausalLM"],"vocab_size":10,
    "hidden_size":8,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":2,
    "max_position_embeddings":32768,"sliding_window":4096,"use_sliding_window":false})",
                              "config.json");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->sliding_window, 0);
  EXPECT_TRUE(q->qkv_bias);
  auto partial = parse_model_config(R"({"architectures":["Qwen2ForCausalLM"],"vocab_size":10,
    "hidden_size":8,"intermediate_size":8,"num_hidden_layers":2,"num_attention_heads":2,
    "max_position_embeddings":32768,"sliding_window":4096,"use_sliding_window":true,
    "max_window_layers":1})",
                                    "config.json");
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("max_window_layers"), std::string::npos);
}

TEST(GenerationConfig, ParsesEosListAndSamplingDefaults) {
  auto g = parse_generation_config(R"({"bos_token_id":1,"eos_token_id":[2,32000],"do_sample":true,
    "temperature":0.6,"top_p":0.9,"top_k":50,"repetition_penalty":1.1})",
                                   "generation_config.json");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int>{2, 32000}));
  EXPECT_FLOAT_EQ(*g->temperature, 0.6f);
  EXPECT_EQ(*g->top_k, 50);
  EXPECT_TRUE(g->do_sample);
  auto single = parse_generation_config(R"({"eos_token_id":7})", "g.json");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->eos_token_ids, (std::vector<int>{7}));
  EXPECT_FALSE(parse_generation_config(R"({"top_p":1.5})", "g.json").ok());
  EXPECT_FALSE(parse_generation_config(R"({"eos_token_id":"x"})", "g.json").ok());
}

TEST(RopeInvFreq, Llama3ScalingMatchesTransformers) {
  // transformers' _compute_llama3_parameters for head_dim 128, theta 500000,
  // factor 8, low 1, high 4, original 8192 (values printed with float32).
  kernels::RopeParams p;
  p.theta = 500000.0;
  p.scaling = kernels::RopeScalingType::llama3;
  p.factor = 8.0;
  const auto inv = kernels::rope_inv_freq(p, 128);
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // high frequency: unchanged
  // Medium band: between the two.
  kernels::RopeParams none = p;
  none.scaling = kernels::RopeScalingType::none;
  const auto raw = kernels::rope_inv_freq(none, 128);
  EXPECT_FLOAT_EQ(inv[63], raw[63] / 8.0f);  // low frequency: divided by the factor
  int medium = 0;
  for (int i = 0; i < 64; ++i) {
    EXPECT_LE(inv[i], raw[i]);
    EXPECT_GE(inv[i], raw[i] / 8.0f * 0.999999f);
    if (inv[i] < raw[i] && inv[i] > raw[i] / 8.0f * 1.000001f) ++medium;
  }
  EXPECT_GT(medium, 0);
}

// The loader checks the checkpoint's tensor set against the config.
class LoaderValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vpod_loader_" + std::to_string(::getpid()));
    MakeModelOptions o;
    o.out_dir = dir_;
    o.preset = "tiny-qwen3";
    o.with_tokenizer = false;
    o.dtype = DType::f32;
    ASSERT_TRUE(make_model(o).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LoaderValidation, RejectsMissingUnexpectedAndMisshapedTensors) {
  auto backend = make_cpu_backend(1);
  ASSERT_TRUE(Model::load(dir_, *backend, {.max_num_tokens = 8, .max_num_sequences = 1}).ok());
  // A Qwen3 checkpoint read as Qwen2: q_norm/k_norm unexpected, biases missing.
  std::string text = *read_text_file(dir_ / "config.json");
  const std::string qwen3 = "Qwen3ForCausalLM";
  text.replace(text.find(qwen3), qwen3.size(), "Qwen2ForCausalLM");
  std::ofstream(dir_ / "config.json") << text;
  auto as_qwen2 = Model::load(dir_, *backend, {.max_num_tokens = 8, .max_num_sequences = 1});
  ASSERT_FALSE(as_qwen2.ok());
  EXPECT_NE(as_qwen2.status().message().find("q_proj.bias"), std::string::npos)
      << as_qwen2.status().message();
  // Llama layout without qk norm: unexpected q_norm, named with the file.
  text.replace(text.find("Qwen2ForCausalLM"), 16, "LlamaForCausalLM");
  std::ofstream(dir_ / "config.json") << text;
  auto as_llama = Model::load(dir_, *backend, {.max_num_tokens = 8, .max_num_sequences = 1});
  ASSERT_FALSE(as_llama.ok());
  EXPECT_NE(as_llama.status().message().find("unexpected tensor"), std::string::npos);
  EXPECT_NE(as_llama.status().message().find("model.safetensors"), std::string::npos);
  // Wrong head_dim: shapes no longer match.
  text.replace(text.find("LlamaForCausalLM"), 16, "Qwen3ForCausalLM");
  const std::string hd = "\"head_dim\": 32";
  ASSERT_NE(text.find(hd), std::string::npos);
  text.replace(text.find(hd), hd.size(), "\"head_dim\": 16");
  std::ofstream(dir_ / "config.json") << text;
  auto misshaped = Model::load(dir_, *backend, {.max_num_tokens = 8, .max_num_sequences = 1});
  ASSERT_FALSE(misshaped.ok());
  EXPECT_NE(misshaped.status().message().find("has shape"), std::string::npos);
}

TEST(MakeModel, SameSeedSameBytesDifferentSeedDifferentBytes) {
  const fs::path base = fs::temp_directory_path() / ("vpod_mm_" + std::to_string(::getpid()));
  auto write = [&](const char* name, std::uint64_t seed, int threads) {
    MakeModelOptions o;
    o.out_dir = base / name;
    o.preset = "tiny-qwen3";
    o.seed = seed;
    o.num_threads = threads;
    o.with_tokenizer = false;
    EXPECT_TRUE(make_model(o).ok());
    return *read_text_file(base / name / "model.safetensors", 1u << 30);
  };
  const std::string a = write("a", 5, 1), b = write("b", 5, 2), c = write("c", 6, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The documented PRNG: splitmix64 of the first element of a known tensor.
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
  fs::remove_all(base);
}

}  // namespace
}  // namespace vpod::model

namespace vpod::model {
namespace {

TEST(GpuMemoryPlan, KvGetsTheBudgetLeftAfterLoading) {
  const std::size_t gb = 1000u * 1000u * 1000u;
  // 141 GB card, 20 GB in use after loading 16 GB of weights, 90% budget.
  auto p = plan_gpu_memory(141 * gb, 121 * gb, 0.9, 16 * gb, 2 * gb, 131072);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->budget_bytes, static_cast<std::size_t>(141 * gb * 0.9));
  EXPECT_EQ(p->kv_bytes, p->budget_bytes - 20 * gb);
  EXPECT_EQ(p->kv_tokens, p->kv_bytes / 131072);
  // Nothing left: a clear resource_exhausted.
  auto none = plan_gpu_memory(141 * gb, 10 * gb, 0.9, 120 * gb, 2 * gb, 131072);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::resource_exhausted);
  EXPECT_FALSE(plan_gpu_memory(141 * gb, 100 * gb, 1.5, 1, 1, 1).ok());
}

}  // namespace
}  // namespace vpod::model
