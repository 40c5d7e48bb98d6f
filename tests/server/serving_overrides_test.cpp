// --chat-template and --generation-config resolution (serving_overrides.h).
#include "server/serving_overrides.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace vpod::server {
namespace {

namespace fs = std::filesystem;

class ServingOverrides : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("vpod_overrides_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  fs::path dir_;
};

TEST_F(ServingOverrides, ChatTemplateFromAFileOrInline) {
  write(dir_ / "t.jinja", "{{ messages[0]['content'] }}");
  auto from_file = resolve_chat_template((dir_ / "t.jinja").string());
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  EXPECT_EQ(*from_file, "{{ messages[0]['content'] }}");
  auto inline_template =
      resolve_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(inline_template.ok());
  EXPECT_EQ(*inline_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
  auto missing = resolve_chat_template((dir_ / "nope.jinja").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.jinja"), std::string::npos);
  EXPECT_NE(missing.status().message().find("no such file"), std::string::npos);
}

TEST_F(ServingOverrides, GenerationConfigAutoTakesTheSamplingFields) {
  write(dir_ / "generation_config.json",
        R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
            "repetition_penalty": 1.05, "eos_token_id": 2})");
  std::string taken;
  auto d = default_sampling_params("auto", dir_, &taken);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FLOAT_EQ(d->temperature, 0.6f);
  EXPECT_FLOAT_EQ(d->top_p, 0.9f);
  EXPECT_EQ(d->top_k, 20);
  EXPECT_FLOAT_EQ(d->min_p, 0.05f);
  EXPECT_FLOAT_EQ(d->repetition_penalty, 1.05f);
  EXPECT_NE(taken.find("temperature=0.6"), std::string::npos) << taken;
  // vllm: the engine's own defaults, the file unread.
  auto v = default_sampling_params("vllm", dir_, &taken);
  ASSERT_TRUE(v.ok());
  const engine::SamplingParams engine_defaults;
  EXPECT_EQ(v->temperature, engine_defaults.temperature);
  EXPECT_EQ(v->top_k, engine_defaults.top_k);
  EXPECT_TRUE(taken.empty());
}

TEST_F(ServingOverrides, GenerationConfigFromAnotherFolder) {
  write(dir_ / "model" / "generation_config.json", R"({"temperature": 0.6})");
  write(dir_ / "other" / "generation_config.json", R"({"temperature": 0.2})");
  auto d = default_sampling_params((dir_ / "other").string(), dir_ / "model");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FLOAT_EQ(d->temperature, 0.2f);
  auto missing = default_sampling_params((dir_ / "empty").string(), dir_ / "model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("generation_config.json"), std::string::npos);
}

TEST_F(ServingOverrides, GenerationConfigSkipsTransformersDefaultsAndMissingFiles) {
  // As vLLM reads it (to_diff_dict): top_k 50 and temperature 1 are
  // transformers' defaults, not the model's choice.
  write(dir_ / "generation_config.json", R"({"temperature": 1.0, "top_k": 50, "top_p": 0.8})");
  auto d = default_sampling_params("auto", dir_);
  ASSERT_TRUE(d.ok());
  const engine::SamplingParams engine_defaults;
  EXPECT_EQ(d->top_k, engine_defaults.top_k);
  EXPECT_FLOAT_EQ(d->top_p, 0.8f);
  // auto without a file: the engine's defaults.
  auto none = default_sampling_params("auto", dir_ / "no-such");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->temperature, engine_defaults.temperature);
  // A bad value in the file is an error naming it.
  write(dir_ / "bad" / "generation_config.json", R"({"top_p": 3})");
  auto bad = default_sampling_params("auto", dir_ / "bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace vpod::server
