// The engine loop with its borrowed parts replaced by deterministic doubles:
// submission and validation, many concurrent requests through a cache too
// small for all (outputs must equal solo runs), abort, engine errors, the
// engine thread with concurrent consumers, output streams and metrics.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/async_executor.h"
#include "engine_doubles.h"

// Counts heap allocations made by this thread while counting is on, to check
// that the engine's steady-state step allocates nothing.
namespace {
thread_local bool count_allocations = false;
thread_local long num_allocations = 0;
}  // namespace

// noinline: keeps GCC from pairing the inlined malloc/free with new/delete
// (-Wmismatched-new-delete).
[[gnu::noinline]] void* operator new(std::size_t size) {
  if (count_allocations) ++num_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace vpod::engine {
namespace {

using testing::ByteDecoderFactory;
using testing::FakeKvCache;
using testing::HashModel;
using testing::SlotMemory;
using testing::word_pieces;

constexpr int kVocab = 500;
constexpr std::int32_t kEos = 0;

std::vector<std::int32_t> random_prompt(std::mt19937& rng, int len) {
  std::vector<std::int32_t> p(len);
  for (auto& t : p) t = 1 + static_cast<std::int32_t>(rng() % (kVocab - 1));
  return p;
}

RequestSpec greedy(std::vector<std::int32_t> prompt, int max_tokens) {
  RequestSpec spec;
  spec.prompt_token_ids = std::move(prompt);
  spec.sampling.temperature = 0.0f;
  spec.stop.max_tokens = max_tokens;
  return spec;
}

// Everything a stream delivered.
struct Collected {
  std::vector<std::int32_t> tokens;
  std::string text;
  RequestOutput last;
  int num_deltas = 0;
};

bool drain(RequestStream& stream, Collected& c) {
  RequestOutput out;
  while (stream.try_pop(out)) {
    c.tokens.insert(c.tokens.end(), out.token_ids.begin(), out.token_ids.end());
    c.text += out.text;
    c.last = out;
    ++c.num_deltas;
  }
  return c.last.finished;
}

// How the engine loop runs: pipelined (EngineConfig::async_scheduling) or
// not, and whether the model runs on an AsyncExecutor's worker thread.
struct LoopMode {
  bool async = true;
  bool worker = false;
};
constexpr LoopMode kLoopModes[] = {{false, false}, {true, false}, {true, true}};

std::string mode_name(LoopMode m) {
  return std::string(m.async ? "async" : "sync") + (m.worker ? "+worker" : "");
}

// A cache, a model and a decoder, wired like production.
struct Rig {
  Rig(int num_slots, int num_blocks, int block_tokens, int max_seqs, int budget,
      int max_tokens_per_slot = 2048, LoopMode mode = {}, bool prefix_caching = false)
      : kv(num_slots, num_blocks, block_tokens, max_tokens_per_slot, &memory, prefix_caching),
        model(&memory, kVocab),
        decoders(word_pieces(kVocab)) {
    if (mode.worker) worker = std::make_unique<AsyncExecutor>(model);
    EngineConfig config;
    config.async_scheduling = mode.async;
    config.scheduler = {.max_num_seqs = max_seqs, .max_num_batched_tokens = budget};
    config.eos_token_ids = {kEos};
    config.vocab_size = kVocab;
    config.max_model_len = std::min<int>(max_tokens_per_slot, num_blocks * block_tokens);
    auto created =
        Engine::create(config, worker ? static_cast<ModelExecutor&>(*worker) : model, kv, decoders);
    EXPECT_TRUE(created.ok()) << created.status().to_string();
    engine = std::move(created).value();
  }
  // Steps until nothing is left; false if that takes more than max_steps.
  bool run(int max_steps = 100000) {
    for (int i = 0; i < max_steps && engine->has_work(); ++i) engine->step();
    return !engine->has_work();
  }

  SlotMemory memory;
  FakeKvCache kv;
  HashModel model;
  std::unique_ptr<AsyncExecutor> worker;  // before the engine: destroyed after it
  ByteDecoderFactory decoders;
  std::unique_ptr<Engine> engine;
};

// The greedy output of one request run alone in a roomy engine.
std::vector<std::int32_t> solo(const RequestSpec& spec) {
  Rig rig(2, 512, 16, 2, 64);
  auto stream = rig.engine->submit(spec);
  EXPECT_TRUE(stream.ok());
  EXPECT_TRUE(rig.run());
  Collected c;
  EXPECT_TRUE(drain(**stream, c));
  return c.tokens;
}

TEST(Engine, CreateRejectsAContextTheCacheCannotHold) {
  SlotMemory memory;
  FakeKvCache kv(4, 8, 16, 1024, &memory);  // 128 tokens in all
  HashModel model(&memory, kVocab);
  ByteDecoderFactory decoders(word_pieces(kVocab));
  EngineConfig config;
  config.max_model_len = 256;
  auto engine = Engine::create(config, model, kv, decoders);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("does not fit in the KV cache"), std::string::npos);
  config.max_model_len = 0;  // defaults to what fits
  config.scheduler = {.max_num_seqs = 4, .max_num_batched_tokens = 16};
  auto fitted = Engine::create(config, model, kv, decoders);
  ASSERT_TRUE(fitted.ok());
  EXPECT_EQ((*fitted)->max_model_len(), 128);
  config.scheduler = {.max_num_seqs = 32, .max_num_batched_tokens = 16};
  EXPECT_EQ(Engine::create(config, model, kv, decoders).status().code(),
            StatusCode::invalid_argument);
}

TEST(Engine, SubmitValidatesTheRequest) {
  Rig rig(4, 64, 16, 4, 64, 256);
  auto expect_invalid = [&](RequestSpec spec, std::string_view what) {
    auto r = rig.engine->submit(std::move(spec));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  expect_invalid(greedy({}, 4), "prompt must not be empty");
  expect_invalid(greedy(std::vector<std::int32_t>(256, 1), 4), "--max-model-len");
  expect_invalid(greedy({1, kVocab}, 4), "outside the vocabulary");
  expect_invalid(greedy({1, -3}, 4), "outside the vocabulary");
  expect_invalid(greedy({1}, 0), "max_tokens");
  RequestSpec s = greedy({1}, 4);
  s.sampling.top_p = 0.0f;
  expect_invalid(s, "top_p");
  s = greedy({1}, 4);
  s.sampling.temperature = -1.0f;
  expect_invalid(s, "temperature");
  s = greedy({1}, 4);
  s.sampling.logprobs = kMaxTopLogprobs + 1;
  expect_invalid(s, "logprobs");
  s = greedy({1}, 4);
  s.stop.min_tokens = 5;
  expect_invalid(s, "min_tokens");
  s = greedy({1}, 4);
  s.stop.stop = {""};
  expect_invalid(s, "stop strings");
  s = greedy({1}, 4);
  s.sampling.presence_penalty = 2.5f;
  expect_invalid(s, "presence_penalty");
  EXPECT_FALSE(rig.engine->has_work());
}

// The issue's end-to-end check, with the model and cache doubles: 64
// concurrent requests through a cache that holds a fraction of them. All
// finish, preemptions happen, and every greedy output equals its solo run.
TEST(Engine, SixtyFourConcurrentRequestsInATightCacheMatchTheirSoloRuns) {
  Rig rig(/*num_slots=*/64, /*num_blocks=*/96, /*block_tokens=*/16, /*max_seqs=*/32,
          /*budget=*/128, /*max_tokens_per_slot=*/1024);
  std::mt19937 rng(42);
  std::vector<RequestSpec> specs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 64; ++i) {
    RequestSpec spec = greedy(random_prompt(rng, 20 + rng() % 200), 8 + rng() % 56);
    spec.stop.ignore_eos = i % 2 == 0;  // half of them may stop early at EOS
    specs.push_back(spec);
    auto stream = rig.engine->submit(spec);
    ASSERT_TRUE(stream.ok());
    streams.push_back(*stream);
  }
  ASSERT_TRUE(rig.run());
  const MetricsSnapshot m = rig.engine->metrics();
  EXPECT_GT(m.num_preemptions, 0u) << "the cache was meant to be too small";
  EXPECT_EQ(m.requests_finished[static_cast<int>(FinishReason::length)] +
                m.requests_finished[static_cast<int>(FinishReason::stop)],
            64u);
  EXPECT_EQ(rig.kv.slots_in_use(), 0);
  EXPECT_EQ(rig.kv.used_blocks(), 0);
  std::uint64_t generated = 0;
  for (int i = 0; i < 64; ++i) {
    Collected c;
    ASSERT_TRUE(drain(*streams[i], c)) << "request " << i << " did not finish";
    EXPECT_EQ(c.tokens, solo(specs[i])) << "request " << i;
    // The text is the tokens' text, without the EOS that stopped it.
    std::vector<std::int32_t> text_tokens = c.tokens;
    if (c.last.finish_reason == FinishReason::stop) {
      EXPECT_EQ(text_tokens.back(), kEos);
      text_tokens.pop_back();
    }
    EXPECT_EQ(c.text, rig.decoders.decode(text_tokens)) << "request " << i;
    generated += c.tokens.size();
  }
  EXPECT_EQ(m.generation_tokens, generated);
}

TEST(Engine, SeededSamplingIsReproducibleAcrossPreemption) {
  std::mt19937 rng(3);
  RequestSpec spec = greedy(random_prompt(rng, 50), 40);
  spec.sampling.temperature = 0.8f;
  spec.sampling.seed = 1234;
  spec.stop.ignore_eos = true;
  const std::vector<std::int32_t> alone = solo(spec);
  // Now behind two older requests in a cache that cannot hold all three.
  Rig rig(8, 12, 16, 8, 64, 192);
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 2; ++i) {
    RequestSpec other = greedy(random_prompt(rng, 40), 60);
    other.stop.ignore_eos = true;
    others.push_back(*rig.engine->submit(other));
  }
  auto stream = rig.engine->submit(spec);
  ASSERT_TRUE(rig.run());
  EXPECT_GT(rig.engine->metrics().num_preemptions, 0u);
  Collected c;
  ASSERT_TRUE(drain(**stream, c));
  EXPECT_EQ(c.tokens, alone);
}

// In the pipelined loop the fifth step is still in flight after five
// step() calls, so four tokens have streamed; the abort drops the fifth.
TEST(Engine, AbortMidGenerationFreesTheSlotAtTheNextStep) {
  for (const LoopMode mode : kLoopModes) {
    SCOPED_TRACE(mode_name(mode));
    const std::size_t streamed = mode.async ? 4 : 5;
    // One slot: a second request can only start once the first is gone.
    Rig rig(/*num_slots=*/1, 64, 16, 4, 64, 1024, mode);
    std::mt19937 rng(9);
    RequestSpec long_spec = greedy(random_prompt(rng, 10), 500);
    long_spec.stop.ignore_eos = true;
    auto first = *rig.engine->submit(long_spec);
    RequestSpec second_spec = greedy(random_prompt(rng, 10), 5);
    second_spec.stop.ignore_eos = true;
    auto second = *rig.engine->submit(second_spec);
    for (int i = 0; i < 5; ++i) rig.engine->step();
    Collected c1, c2;
    drain(*first, c1);
    EXPECT_EQ(c1.tokens.size(), streamed);
    EXPECT_FALSE(c1.last.finished);
    EXPECT_EQ(rig.engine->scheduler().num_waiting(), 1u);  // no slot for the second

    rig.engine->abort(first->id());
    rig.engine->abort(first->id());  // twice is harmless
    rig.engine->abort(9999);         // unknown ids are ignored
    rig.engine->step();              // boundary: slot freed, second admitted in the same step
    drain(*first, c1);
    EXPECT_TRUE(c1.last.finished);
    EXPECT_EQ(c1.last.finish_reason, FinishReason::abort);
    EXPECT_EQ(c1.tokens.size(), streamed);  // nothing streamed after the abort
    EXPECT_EQ(rig.engine->scheduler().num_running(), 1u);
    EXPECT_EQ(rig.engine->scheduler().num_waiting(), 0u);
    ASSERT_TRUE(rig.run());
    ASSERT_TRUE(drain(*second, c2));
    EXPECT_EQ(c2.tokens, solo(second_spec));
    EXPECT_EQ(rig.kv.slots_in_use(), 0);
    EXPECT_EQ(rig.engine->metrics().requests_finished[static_cast<int>(FinishReason::abort)], 1u);
  }
}

TEST(Engine, AbortOfAWaitingRequestNeverRunsIt) {
  Rig rig(1, 64, 16, 4, 64, 1024);
  auto a = *rig.engine->submit(greedy({5, 6, 7}, 3));
  auto b = *rig.engine->submit(greedy({8, 9}, 3));
  rig.engine->abort(b->id());  // still in the inbox
  ASSERT_TRUE(rig.run());
  Collected ca, cb;
  ASSERT_TRUE(drain(*a, ca));
  ASSERT_TRUE(drain(*b, cb));
  EXPECT_EQ(cb.last.finish_reason, FinishReason::abort);
  EXPECT_TRUE(cb.tokens.empty());
  EXPECT_EQ(rig.kv.num_allocations, 1);
}

TEST(Engine, AFailedForwardFailsItsRequestsAndFreesThem) {
  Rig rig(4, 64, 16, 4, 64, 1024);
  rig.model.fail_at_forward = 3;
  auto a = *rig.engine->submit(greedy({5, 6, 7}, 10));
  auto b = *rig.engine->submit(greedy({8, 9}, 10));
  ASSERT_TRUE(rig.run());
  for (auto* s : {a.get(), b.get()}) {
    Collected c;
    ASSERT_TRUE(drain(*s, c));
    EXPECT_EQ(c.last.finish_reason, FinishReason::error);
    EXPECT_NE(c.last.error.find("injected device failure"), std::string::npos);
    EXPECT_EQ(c.tokens.size(), 2u);
  }
  EXPECT_EQ(rig.kv.slots_in_use(), 0);
  // The engine keeps serving.
  auto c = *rig.engine->submit(greedy({8, 9}, 4));
  ASSERT_TRUE(rig.run());
  Collected cc;
  ASSERT_TRUE(drain(*c, cc));
  EXPECT_EQ(cc.tokens.size(), 4u);
}

// The loop on its own thread, with submitting and consuming threads, as a
// server uses it; stop() ends what is left with "abort".
class ThreadedEngine : public ::testing::TestWithParam<LoopMode> {};

TEST_P(ThreadedEngine, ServesConcurrentClients) {
  Rig rig(16, 256, 16, 8, 64, 1024, GetParam());
  rig.engine->start();
  constexpr int kClients = 8;
  constexpr int kPerClient = 6;
  std::atomic<int> notified{0};
  std::atomic<int> mismatches{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(100 + c);
      for (int k = 0; k < kPerClient; ++k) {
        RequestSpec spec = greedy(random_prompt(rng, 5 + rng() % 40), 1 + rng() % 30);
        auto stream = rig.engine->submit(spec, [&] { notified.fetch_add(1); });
        if (!stream.ok()) {
          mismatches.fetch_add(1);
          continue;
        }
        Collected got;
        RequestOutput out;
        while (!got.last.finished) {
          if (!(*stream)->pop(out, std::chrono::milliseconds(5000))) break;  // timed out
          got.tokens.insert(got.tokens.end(), out.token_ids.begin(), out.token_ids.end());
          got.last = out;
        }
        if (!got.last.finished || got.tokens != solo(spec)) mismatches.fetch_add(1);
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(notified.load(), 0);

  // A request still running at stop() is aborted and its stream ends. The
  // test model generates a token in microseconds, so each output of this
  // request holds the engine thread for a millisecond: its 1,000 tokens would
  // take a second, and stop() comes right after the first one.
  RequestSpec endless = greedy({1, 2, 3}, 1000);
  endless.stop.ignore_eos = true;
  auto stream = *rig.engine->submit(
      endless, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
  RequestOutput out;
  ASSERT_TRUE(stream->pop(out, std::chrono::milliseconds(5000)));
  ASSERT_FALSE(out.finished) << "the request ended before stop(): " << out.token_ids.size()
                             << " tokens";
  rig.engine->stop();
  Collected c;
  drain(*stream, c);
  EXPECT_TRUE(c.last.finished);
  EXPECT_EQ(c.last.finish_reason, FinishReason::abort);
  EXPECT_EQ(rig.kv.slots_in_use(), 0);
  EXPECT_EQ(rig.engine->submit(greedy({1}, 1)).status().code(), StatusCode::unavailable);
}

INSTANTIATE_TEST_SUITE_P(Loops, ThreadedEngine, ::testing::ValuesIn(kLoopModes),
                         [](const ::testing::TestParamInfo<LoopMode>& info) {
                           std::string name = mode_name(info.param);
                           name.erase(std::remove(name.begin(), name.end(), '+'), name.end());
                           return name;
                         });

// Buffers are sized up front: once requests are decoding, a step (schedule,
// prepare, forward, commit, stop rules, detokenization, streaming, metrics)
// makes no heap allocation.
TEST(Engine, SteadyStateStepsDoNotAllocate) {
  for (const LoopMode mode : kLoopModes) {
    SCOPED_TRACE(mode_name(mode));
    Rig rig(16, 256, 16, 16, 64, 1024, mode);
    std::mt19937 rng(5);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 12; ++i) {
      RequestSpec spec = greedy(random_prompt(rng, 10), 40);
      spec.stop.ignore_eos = true;
      spec.stop.stop = {"zzzq"};  // exercise stop-string matching too
      streams.push_back(*rig.engine->submit(spec));
    }
    for (int i = 0; i < 3; ++i) rig.engine->step();  // admission and prefill
    ASSERT_EQ(rig.engine->scheduler().num_running(), 12u);
    num_allocations = 0;
    count_allocations = true;
    for (int i = 0; i < 20; ++i) rig.engine->step();
    count_allocations = false;
    EXPECT_EQ(num_allocations, 0) << "allocations in 20 decode steps of 12 requests";
    RequestOutput out;
    ASSERT_TRUE(streams[0]->try_pop(out));
    EXPECT_EQ(out.token_ids.size(), mode.async ? 22u : 23u);  // pipelined: one in flight
  }
}

// With prefix caching, the steps that admit requests onto cached blocks,
// run their prefill chunks from the first uncached token, report computed
// prompts to the cache and finish requests allocate nothing either (the
// requests' own state is allocated at submission and taken in by the first
// step, outside the count).
TEST(Engine, StepsWithPrefixCacheHitsDoNotAllocate) {
  for (const LoopMode mode : kLoopModes) {
    SCOPED_TRACE(mode_name(mode));
    Rig rig(16, 256, 16, /*max_seqs=*/4, /*budget=*/64, 1024, mode, /*prefix_caching=*/true);
    std::mt19937 rng(8);
    const std::vector<std::int32_t> system = random_prompt(rng, 100);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 12; ++i) {
      std::vector<std::int32_t> prompt = system;
      for (std::int32_t t : random_prompt(rng, 1 + i)) prompt.push_back(t);
      RequestSpec spec = greedy(prompt, 6 + i);
      spec.stop.ignore_eos = true;
      streams.push_back(*rig.engine->submit(spec));
    }
    rig.engine->step();  // takes the requests in; admits the first four
    num_allocations = 0;
    count_allocations = true;
    ASSERT_TRUE(rig.run());
    count_allocations = false;
    EXPECT_EQ(num_allocations, 0) << "allocations in the steps of 12 requests sharing a prefix";
    EXPECT_GE(rig.kv.hit_tokens, 8 * 96) << "the later requests were meant to hit the prefix";
    EXPECT_GT(rig.kv.num_cache_prompts, 12);
  }
}

TEST(RequestStream, MergesPendingDeltasIntoOnePop) {
  RequestStream stream(7, 16, true);
  RequestOutput d;
  d.id = 7;
  d.token_ids = {1};
  d.text = "a";
  d.logprobs.resize(1);
  d.num_generated_tokens = 1;
  stream.push(d);
  d.token_ids = {2};
  d.text = "b";
  d.num_generated_tokens = 2;
  d.finished = true;
  d.finish_reason = FinishReason::length;
  stream.push(d);
  EXPECT_TRUE(stream.finished());
  RequestOutput out;
  ASSERT_TRUE(stream.try_pop(out));
  EXPECT_EQ(out.token_ids, (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(out.text, "ab");
  EXPECT_EQ(out.logprobs.size(), 2u);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.finish_reason, FinishReason::length);
  EXPECT_EQ(out.num_generated_tokens, 2);
  EXPECT_FALSE(stream.try_pop(out));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(stream.pop(out, std::chrono::milliseconds(20)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
}

TEST(Engine, MetricsCountWhatHappened) {
  Rig rig(8, 128, 16, 8, 64, 1024);
  std::mt19937 rng(11);
  int prompt_tokens = 0;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 10; ++i) {
    RequestSpec spec = greedy(random_prompt(rng, 10 + i), 5);
    spec.stop.ignore_eos = true;
    prompt_tokens += 10 + i;
    streams.push_back(*rig.engine->submit(spec));
  }
  ASSERT_TRUE(rig.run());
  const MetricsSnapshot m = rig.engine->metrics();
  EXPECT_EQ(m.prompt_tokens, static_cast<std::uint64_t>(prompt_tokens));
  EXPECT_EQ(m.generation_tokens, 50u);
  EXPECT_EQ(m.requests_finished[static_cast<int>(FinishReason::length)], 10u);
  EXPECT_EQ(m.time_to_first_token_s.count, 10u);
  EXPECT_EQ(m.e2e_request_latency_s.count, 10u);
  EXPECT_EQ(m.request_queue_time_s.count, 10u);
  EXPECT_EQ(m.time_per_output_token_s.count, 10u);
  EXPECT_EQ(m.inter_token_latency_s.count, 40u);
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.num_requests_waiting, 0);
  EXPECT_EQ(m.kv_cache_usage_ratio, 0.0);
  EXPECT_EQ(m.num_steps, static_cast<std::uint64_t>(rig.model.num_forwards));
  EXPECT_GT(m.step_time_total.forward_s, 0.0);
  EXPECT_EQ(m.step_duration_s.count, m.num_steps);
  // Every launched step is of one kind, as the model saw it.
  EXPECT_EQ(m.steps_by_kind[0] + m.steps_by_kind[1] + m.steps_by_kind[2], m.num_steps);
  EXPECT_EQ(m.steps_by_kind[static_cast<int>(StepKind::prefill)],
            static_cast<std::uint64_t>(rig.model.prefill_only_forwards));
  EXPECT_EQ(m.steps_by_kind[static_cast<int>(StepKind::decode)],
            static_cast<std::uint64_t>(rig.model.decode_only_forwards));
  EXPECT_EQ(m.steps_by_kind[static_cast<int>(StepKind::hybrid)],
            static_cast<std::uint64_t>(rig.model.hybrid_forwards));
  EXPECT_EQ(m.hybrid_step_decodes, static_cast<std::uint64_t>(rig.model.hybrid_decodes));
  EXPECT_GT(rig.model.hybrid_forwards, 0);  // ten requests, eight slots: chunks meet decodes
  EXPECT_GT(rig.model.decode_only_forwards, 0);

  // Request-level histograms: one observation per finished request.
  EXPECT_EQ(m.request_prefill_time_s.count, 10u);
  EXPECT_EQ(m.request_decode_time_s.count, 10u);
  EXPECT_EQ(m.request_inference_time_s.count, 10u);
  EXPECT_EQ(m.request_prompt_tokens.count, 10u);
  EXPECT_EQ(m.request_prompt_tokens.sum, prompt_tokens);
  EXPECT_EQ(m.request_generation_tokens.sum, 50.0);
  EXPECT_EQ(m.request_max_tokens.sum, 50.0);
  // Every launched step's tokens: each prompt once (nothing was preempted)
  // and the 4 decodes of each request after its first token.
  ASSERT_EQ(m.num_preemptions, 0u);
  EXPECT_EQ(m.iteration_tokens.count, m.num_steps);
  EXPECT_EQ(m.iteration_tokens.sum, prompt_tokens + 40);

  const std::string text = format_prometheus(m, "tiny");
  const std::string labels = "{model_name=\"tiny\",engine=\"0\"}";
  const std::string expected[] = {
      "vllm:num_requests_running" + labels + " 0.0",
      "vllm:num_requests_waiting" + labels + " 0.0",
      "vllm:kv_cache_usage_perc" + labels + " 0.0",
      "vllm:gpu_cache_usage_perc" + labels + " 0.0",
      "vllm:generation_tokens_total" + labels + " 50",
      "vllm:num_preemptions_total" + labels + " 0",
      "vllm:time_to_first_token_seconds_count" + labels + " 10",
      "vllm:request_time_per_output_token_seconds_bucket{model_name=\"tiny\",engine=\"0\",le="
      "\"+Inf\"} 10",
      "vllm:time_per_output_token_seconds_count" + labels + " 40",
      "vllm:inter_token_latency_seconds_count" + labels + " 40",
      "vllm:e2e_request_latency_seconds_sum" + labels + " ",
      "vllm:request_prefill_time_seconds_count" + labels + " 10",
      "vllm:request_decode_time_seconds_count" + labels + " 10",
      "vllm:request_inference_time_seconds_count" + labels + " 10",
      "vllm:request_queue_time_seconds_count" + labels + " 10",
      "vllm:request_generation_tokens_sum" + labels + " 50.0",
      "vllm:request_max_num_generation_tokens_count" + labels + " 10",
      "vllm:request_params_max_tokens_count" + labels + " 10",
      "vllm:request_success_total{model_name=\"tiny\",engine=\"0\",finished_reason=\"length\"} "
      "10",
      std::string("# TYPE vllm:inter_token_latency_seconds histogram"),
      std::string("# TYPE vllm:iteration_tokens_total histogram"),
      std::string(
          "vpod_step_phase_seconds_total{model_name=\"tiny\",engine=\"0\",phase=\"forward\"}"),
      std::string("# TYPE vpod_steps_by_kind_total counter"),
      "vpod_hybrid_step_decodes_total" + labels + " ",
      std::string(
          "vpod_step_host_seconds_total{model_name=\"tiny\",engine=\"0\",overlap=\"hidden\"} "),
      std::string(
          "vpod_step_host_seconds_total{model_name=\"tiny\",engine=\"0\",overlap=\"exposed\"} ")};
  for (const std::string& name : expected)
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  EXPECT_NE(text.find("vllm:prompt_tokens_total" + labels + " " + std::to_string(prompt_tokens)),
            std::string::npos);
  // Every engine sample carries the labels; no engine series is left under vpod_'s old names.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("#")) continue;
    EXPECT_NE(line.find("{model_name=\"tiny\",engine=\"0\""), std::string::npos) << line;
    EXPECT_TRUE(line.starts_with("vllm:") || line.starts_with("vpod_step") ||
                line.starts_with("vpod_hybrid_step") || line.starts_with("vpod_grammar_"))
        << line;
  }
}

TEST(Histogram, BucketsAreInclusiveUpperBounds) {
  const double bounds[] = {0.1, 1.0};
  Histogram h(bounds);
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0}) h.observe(v);
  const HistogramData d = h.snapshot();
  EXPECT_EQ(d.bucket_counts, (std::vector<std::uint64_t>{2, 2, 1}));
  EXPECT_EQ(d.count, 5u);
  EXPECT_DOUBLE_EQ(d.sum, 4.65);
  MetricsSnapshot m = EngineMetrics().snapshot();
  m.time_to_first_token_s = d;
  const std::string text = format_prometheus(m, "m");
  // Cumulative counts, `le` as Prometheus clients print it, +Inf == _count.
  for (const char* line :
       {"vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\","
        "le=\"0.1\"} 2\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\","
        "le=\"1.0\"} 4\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\","
        "le=\"+Inf\"} 5\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"m\",engine=\"0\"} 5\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  EXPECT_EQ(text.find("0.10000000000000001"), std::string::npos);
}

TEST(Histogram, EngineHistogramsUseVllmBuckets) {
  const MetricsSnapshot m = EngineMetrics(4096).snapshot();
  EXPECT_EQ(m.time_to_first_token_s.upper_bounds.size(), 22u);
  EXPECT_EQ(m.time_to_first_token_s.upper_bounds.back(), 2560.0);
  EXPECT_EQ(m.inter_token_latency_s.upper_bounds.size(), 19u);
  EXPECT_EQ(m.e2e_request_latency_s.upper_bounds.size(), 21u);
  EXPECT_EQ(m.request_prefill_time_s.upper_bounds, m.e2e_request_latency_s.upper_bounds);
  EXPECT_EQ(m.request_prompt_tokens.upper_bounds, buckets_1_2_5(4096));
  EXPECT_EQ(m.iteration_tokens.upper_bounds.back(), 16384.0);
}

TEST(Histogram, Buckets125StopAtTheMaximum) {
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(4096),
            (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}));
  EXPECT_EQ(buckets_1_2_5(1), (std::vector<double>{1}));
}

TEST(PrometheusFloat, PrintsWhatPythonsClientPrints) {
  // Expected strings are prometheus_client 0.26's floatToGoString (repr based).
  const std::pair<double, const char*> cases[] = {
      {0.1, "0.1"},           {0.25, "0.25"},       {1.0, "1.0"},
      {2560.0, "2560.0"},     {0.001, "0.001"},     {0.0001, "0.0001"},
      {0.00001, "1e-05"},     {0.0005, "0.0005"},   {7.5, "7.5"},
      {0.0, "0.0"},           {-2.5, "-2.5"},       {100000.0, "100000.0"},
      {200000.0, "200000.0"}, {1000000.0, "1e+06"}, {1234567.5, "1.2345675e+06"},
      {1e16, "1e+16"},        {2e13, "2e+13"},      {1.5e-7, "1.5e-07"},
      {123.456, "123.456"},   {0.3, "0.3"},         {0.1 + 0.2, "0.30000000000000004"}};
  for (const auto& [value, expected] : cases) EXPECT_EQ(prometheus_float(value), expected) << value;
  EXPECT_EQ(prometheus_float(INFINITY), "+Inf");
  EXPECT_EQ(prometheus_float(-INFINITY), "-Inf");
  EXPECT_EQ(prometheus_float(NAN), "NaN");
}

TEST(PrometheusFloat, ModelNameIsEscaped) {
  const std::string text = format_prometheus(EngineMetrics().snapshot(), "a\"b\\c\nd");
  EXPECT_NE(text.find("vllm:num_requests_running{model_name=\"a\\\"b\\\\c\\nd\",engine=\"0\"} 0.0"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace vpod::engine
