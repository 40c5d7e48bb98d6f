// The engine over a tensor-parallel stack on the CPU (--tensor-parallel-size
// 2: two rank threads, in-process communicators, one vAttention cache per
// rank admitted against as one): several concurrent requests, chunked
// prefills and preemption-free decoding give the same greedy tokens as the
// whole model; sizes the model does not divide and multi-node launches are
// refused with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "engine/engine_stack.h"
#include "model/temp_model_dir.h"

namespace vpod::engine {
namespace {

StackOptions options(const std::filesystem::path& dir, int tp) {
  StackOptions o;
  o.model_dir = dir;
  o.device = DeviceRequest::cpu;
  o.cpu_threads = 2;
  o.max_model_len = 128;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 24;  // prompts of 30+ tokens take two chunks
  o.load_tokenizer = false;
  o.tensor_parallel_size = tp;
  return o;
}

// Submits 7 requests at once (more than --max-num-seqs: some wait for a
// slot) and returns each one's greedy tokens.
std::map<int, std::vector<std::int32_t>> serve_all(EngineStack& stack) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 7; ++r) {
    RequestSpec spec;
    // Request 6 extends request 5's prompt: prefix caching may serve its
    // first blocks from every rank's cache.
    const int id = std::min(r, 5);
    for (int i = 0; i < 5 + 7 * id; ++i) spec.prompt_token_ids.push_back(1000 + 37 * i + 11 * id);
    if (r == 6) spec.prompt_token_ids.insert(spec.prompt_token_ids.end(), {7, 8, 9});
    spec.sampling.temperature = 0.0f;
    spec.stop.max_tokens = 10;
    spec.stop.ignore_eos = true;
    auto stream = stack.engine().submit(std::move(spec));
    EXPECT_TRUE(stream.ok()) << stream.status().to_string();
    if (stream.ok()) streams.push_back(*stream);
  }
  std::map<int, std::vector<std::int32_t>> tokens;
  for (std::size_t r = 0; r < streams.size(); ++r) {
    RequestOutput out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    for (bool finished = false; !finished && std::chrono::steady_clock::now() < deadline;) {
      if (!streams[r]->pop(out, std::chrono::milliseconds(1000))) continue;
      tokens[static_cast<int>(r)].insert(tokens[static_cast<int>(r)].end(), out.token_ids.begin(),
                                         out.token_ids.end());
      finished = out.finished;
    }
    EXPECT_EQ(out.finish_reason, FinishReason::length) << "request " << r << ": " << out.error;
  }
  return tokens;
}

TEST(TensorParallelEngine, TwoRanksServeTheWholeModelsGreedyTokens) {
  // tiny: its 2 KV heads split over the ranks; tiny-qwen3: its 1 KV head
  // replicated.
  for (const char* preset : {"tiny", "tiny-qwen3"}) {
    const model::testing::TempModelDir dir(preset, 17);
    ASSERT_TRUE(dir.status().ok()) << dir.status().to_string();
    auto whole = EngineStack::build(options(dir.path(), 1));
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    const auto reference = serve_all(**whole);
    const std::size_t whole_kv_bytes = (*whole)->kv_cache_bytes();
    whole->reset();
    ASSERT_EQ(reference.size(), 7u);

    for (bool async : {true, false}) {
      StackOptions o = options(dir.path(), 2);
      o.async_scheduling = async;
      auto split = EngineStack::build(o);
      ASSERT_TRUE(split.ok()) << split.status().to_string();
      EXPECT_EQ((*split)->tensor_parallel_size(), 2);
      EXPECT_NE((*split)->summary().find("tensor parallel x2 over in-process"), std::string::npos)
          << (*split)->summary();
      EXPECT_NE((*split)->summary().find("per rank, 2 ranks"), std::string::npos)
          << (*split)->summary();
      // Each rank's cache holds half the KV heads (or the one replicated).
      if (std::string(preset) == "tiny") {
        EXPECT_LT((*split)->kv_cache_bytes(), whole_kv_bytes);
      }
      EXPECT_EQ(serve_all(**split), reference) << preset << (async ? " async" : " sync");
    }
  }
}

TEST(TensorParallelEngine, RefusesSizesAndLaunchesItCannotServe) {
  const model::testing::TempModelDir dir("tiny", 3);
  ASSERT_TRUE(dir.status().ok());
  auto three = EngineStack::build(options(dir.path(), 3));
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(three.status().message().find(
                "--tensor-parallel-size 3: the model's attention heads (4) is not divisible by 3"),
            std::string::npos)
      << three.status().to_string();

  StackOptions zero = options(dir.path(), 0);
  EXPECT_NE(EngineStack::build(zero).status().message().find("--tensor-parallel-size must be >= 1"),
            std::string::npos);

  StackOptions bad_rank = options(dir.path(), 2);
  bad_rank.distributed.nnodes = 2;
  bad_rank.distributed.node_rank = 2;
  auto refused_rank = EngineStack::build(bad_rank);
  EXPECT_NE(refused_rank.status().message().find("--node-rank must be in [0, --nnodes = 2), got 2"),
            std::string::npos)
      << refused_rank.status().to_string();

  StackOptions bad_port = options(dir.path(), 2);
  bad_port.distributed.master_port = 70000;
  EXPECT_NE(EngineStack::build(bad_port).status().message().find("--master-port"),
            std::string::npos);

  StackOptions two_nodes = options(dir.path(), 2);
  two_nodes.distributed.nnodes = 2;
  auto multi = EngineStack::build(two_nodes);
  ASSERT_FALSE(multi.ok());
  EXPECT_EQ(multi.status().code(), StatusCode::unimplemented);
  EXPECT_NE(multi.status().message().find("--nnodes 2"), std::string::npos)
      << multi.status().to_string();
}

}  // namespace
}  // namespace vpod::engine
