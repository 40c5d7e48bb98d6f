// The CPU backend against Hugging Face transformers (goldens made by
// tools/model/make_goldens.py): see golden_support.h for the scenario.
#include <gtest/gtest.h>

#include "model/golden_support.h"

namespace vpod::model {
namespace {

constexpr float kCpuLogitTolerance = 2e-4f;

class GoldenTest : public ::testing::TestWithParam<int> {};

TEST_P(GoldenTest, CpuBackendMatchesTransformers) {
  const auto goldens = testing::load_goldens();
  auto backend = make_cpu_backend(2);
  testing::run_golden_case(goldens["cases"][GetParam()], *backend, kCpuLogitTolerance);
}

std::string case_name(const ::testing::TestParamInfo<int>& info) {
  const char* names[] = {"tiny_llama3", "tiny_qwen2", "tiny_qwen3"};
  return names[info.param];
}

INSTANTIATE_TEST_SUITE_P(Presets, GoldenTest, ::testing::Values(0, 1, 2), case_name);

}  // namespace
}  // namespace vpod::model
