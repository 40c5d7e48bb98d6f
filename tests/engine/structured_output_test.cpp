// Structured output through the engine on the CPU backend (the tiny Llama-3
// model, the real tokenizer, the vAttention cache): constrained requests in a
// KV budget that forces preemptions finish by their grammar, obey it, and
// equal their solo runs token for token (the matcher survives recompute),
// also when rows whose mask is late sit steps out; the grammar's end beats
// min_tokens and ignore_eos.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "e2e_support.h"
#include "grammar/grammar_compiler.h"

namespace vpod::engine::e2e {
namespace {

Env* env = nullptr;
std::string skip_reason;

class StructuredOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env = new Env;
    skip_reason = load_cpu_tiny_env(*env);
    if (!skip_reason.empty()) return;
    // The tokenizer outlives every engine of the suite.
    std::shared_ptr<const tokenizer::Tokenizer> tok(env->tok.get(),
                                                    [](const tokenizer::Tokenizer*) {});
    env->grammar = std::make_shared<grammar::GrammarCompiler>(
        grammar::VocabularySource{.tokenizer = tok,
                                  .tokenizer_json = env->dir / "tokenizer.json",
                                  .vocab_size = env->model->config().vocab_size,
                                  .stop_token_ids = env->model->generation_config().eos_token_ids});
  }
  static void TearDownTestSuite() {
    if (!env->dir.empty()) fs::remove_all(env->dir);
    delete env;
    env = nullptr;
  }
  void SetUp() override {
    if (skip_reason.rfind("loading", 0) == 0) FAIL() << skip_reason;
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
  }
};

// A random-weight model rarely picks a closing token among ~128k: +30 on
// `"`, `}`, `]`, `,` and `:` (Llama-3 ids) ends strings and containers. The mask
// comes first, so only allowed tokens are favoured.
const std::vector<kernels::LogitBias> kSteer = {
    {1, 30.0f}, {92, 30.0f}, {60, 30.0f}, {11, 30.0f}, {25, 30.0f}};

const char* kSchema = R"({"type": "object",
  "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                 "kind": {"enum": ["a", "b", "c"]},
                 "name": {"type": "string", "maxLength": 10},
                 "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 4}},
  "required": ["id", "kind", "name", "tags"], "additionalProperties": false})";

RequestSpec constrained(int i) {
  RequestSpec spec = greedy(*env, texts()[static_cast<std::size_t>(i) % texts().size()], 120);
  spec.sampling.temperature = 1.0f;
  spec.sampling.seed = 100 + static_cast<std::uint64_t>(i);
  spec.sampling.logit_bias = kSteer;
  spec.stop.ignore_eos = false;
  switch (i % 4) {
    case 0: spec.constraint = {grammar::ConstraintKind::json_schema, kSchema, true}; break;
    case 1: spec.constraint = {grammar::ConstraintKind::regex, "[a-z]{2,6}-[0-9]{2}", true}; break;
    case 2:
      spec.constraint = {grammar::ConstraintKind::choice, R"(["red", "green", "blue"])", true};
      break;
    case 3: spec.constraint = {grammar::ConstraintKind::json_object, "", false}; break;
  }
  return spec;
}

void expect_obeys(int i, const std::string& text) {
  switch (i % 4) {
    case 0: {
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      ASSERT_TRUE(j.is_object()) << text;
      EXPECT_EQ(j.size(), 4u) << text;
      EXPECT_TRUE(j["id"].is_number_integer() && j["id"] >= 0 && j["id"] <= 999) << text;
      EXPECT_TRUE(j["kind"] == "a" || j["kind"] == "b" || j["kind"] == "c") << text;
      EXPECT_TRUE(j["tags"].is_array() && j["tags"].size() <= 4) << text;
      break;
    }
    case 1: EXPECT_TRUE(std::regex_match(text, std::regex("[a-z]{2,6}-[0-9]{2}"))) << text; break;
    case 2: EXPECT_TRUE(text == "red" || text == "green" || text == "blue") << text; break;
    case 3: EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_object()) << text; break;
  }
}

// 32 constrained requests through a KV budget that forces preemptions; each
// must finish by its grammar, obey it and equal its solo run. With `defer`
// the runner lets a decode row whose mask is not ready sit the step out (on
// the CPU backend that is nearly every decode row: its forward is done
// before the mask jobs start), so every such row reruns its decode.
void run_constrained_batch(bool defer) {
  constexpr int kRequests = 32;
  std::vector<RequestSpec> specs;
  std::int64_t total = 0;
  for (int i = 0; i < kRequests; ++i) {
    specs.push_back(constrained(i));
    total += static_cast<std::int64_t>(specs.back().prompt_token_ids.size()) + 40;
  }
  Stack stack(*env, std::max<std::int64_t>(total / 5, env->max_ctx), /*max_slots=*/kRequests);
  stack.runner->set_defer_unready_masks(defer);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const RequestSpec& s : specs) {
    auto stream = stack.engine->submit(s);
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    streams.push_back(*stream);
  }
  ASSERT_TRUE(stack.run());
  EXPECT_GT(stack.engine->metrics().num_preemptions, 0u) << "meant to force preemptions";
  if (defer) {
    EXPECT_GT(stack.engine->metrics().grammar_deferred_samples, 0u) << "meant to defer rows";
  } else {
    EXPECT_EQ(stack.engine->metrics().grammar_deferred_samples, 0u);
  }
  for (int i = 0; i < kRequests; ++i) {
    const Output got = collect(*streams[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(got.last.finished) << "request " << i;
    EXPECT_EQ(got.last.finish_reason, FinishReason::stop) << "request " << i << ": " << got.text;
    expect_obeys(i, got.text);
    const Output solo = alone(*env, specs[static_cast<std::size_t>(i)]);
    EXPECT_EQ(got.tokens, solo.tokens) << "request " << i;
  }
}

TEST_F(StructuredOutput, ConstrainedRequestsSurvivePreemptionAndMatchTheirSoloRuns) {
  run_constrained_batch(/*defer=*/false);
}

// Deferred rows rerun their decode: the outputs do not change.
TEST_F(StructuredOutput, DeferredMaskRowsRerunAndMatchTheirSoloRuns) {
  run_constrained_batch(/*defer=*/true);
}

// The grammar allows only EOS once "red" is complete: min_tokens does not
// suppress it then, and ignore_eos does not keep the request going.
TEST_F(StructuredOutput, TheGrammarsEndBeatsMinTokensAndIgnoreEos) {
  for (bool ignore_eos : {false, true}) {
    RequestSpec spec = greedy(*env, "Pick a colour:", 50);
    spec.constraint = {grammar::ConstraintKind::choice, R"(["red"])", true};
    spec.stop.min_tokens = 10;
    spec.stop.ignore_eos = ignore_eos;
    const Output out = alone(*env, spec);
    ASSERT_TRUE(out.last.finished);
    EXPECT_EQ(out.last.finish_reason, FinishReason::stop);
    EXPECT_EQ(out.text, "red");
  }
}

TEST_F(StructuredOutput, ABadSpecIsRefusedAtSubmission) {
  Stack stack(*env, 2 * env->max_ctx, 2);
  RequestSpec spec = greedy(*env, "x", 4);
  spec.constraint = {grammar::ConstraintKind::json_schema, R"({"type": "array", "contains": {}})",
                     true};
  auto refused = stack.engine->submit(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(refused.status().message().find("contains"), std::string::npos);
  EXPECT_FALSE(stack.engine->has_work());
}

}  // namespace
}  // namespace vpod::engine::e2e
