// Prefix caching through the whole engine loop, with the FakeKvCache's own
// prefix cache: streams are delta for delta those of the engine without
// caching (greedy and seeded sampling, stop strings, aborts, preemption,
// every loop mode) while prefills really skip their cached tokens; usage
// reports the first admission's cached tokens; the counters and /metrics
// say what was looked up and found.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/async_executor.h"
#include "engine/engine.h"
#include "engine_doubles.h"
#include "engine_rig.h"

namespace vpod::engine {
namespace {

using namespace testing;  // the doubles and the rig (engine_rig.h)

// Requests built on a few shared system prompts (some repeated outright,
// some under another cache salt), with the sampling and stop features the
// engine has, and clients that disconnect.
Workload shared_prefix_workload(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::mt19937 rng_scoring(seed ^ 0x5C0BEu);  // prompt logprobs, apart from the rest
  const std::vector<std::string> pieces = word_pieces(kVocab);
  std::vector<std::vector<std::int32_t>> systems(3);
  for (auto& s : systems) {
    const int len = 4 + static_cast<int>(rng() % 60);
    for (int k = 0; k < len; ++k) s.push_back(1 + static_cast<std::int32_t>(rng() % (kVocab - 1)));
  }
  Workload w;
  for (int i = 0; i < n; ++i) {
    RequestSpec spec;
    if (!w.specs.empty() && rng() % 4 == 0) {
      spec.prompt_token_ids = w.specs[rng() % w.specs.size()].prompt_token_ids;
    } else {
      spec.prompt_token_ids = systems[rng() % systems.size()];
      const int unique = 1 + static_cast<int>(rng() % 30);
      for (int k = 0; k < unique; ++k)
        spec.prompt_token_ids.push_back(1 + static_cast<std::int32_t>(rng() % (kVocab - 1)));
    }
    if (rng() % 4 == 0) spec.cache_salt = rng() % 2 == 0 ? "tenant-a" : "tenant-b";
    spec.stop.max_tokens = 1 + static_cast<int>(rng() % 30);
    if (rng() % 3 == 0) {
      spec.sampling.temperature = 0.8f;
      spec.sampling.seed = rng();
    } else {
      spec.sampling.temperature = 0.0f;
    }
    if (rng() % 3 == 0) spec.stop.stop.push_back(pieces[rng() % kVocab] + pieces[rng() % kVocab]);
    if (rng() % 5 == 0) spec.stop.ignore_eos = true;
    if (rng() % 4 == 0) spec.sampling.logprobs = static_cast<int>(rng() % 3);
    // Prompt logprobs bypass the cache's lookup; some only score (max_tokens 0).
    if (rng_scoring() % 6 == 0) {
      spec.sampling.prompt_logprobs = static_cast<int>(rng_scoring() % 3);
      if (rng_scoring() % 3 == 0) spec.stop.max_tokens = 0;
    }
    w.specs.push_back(std::move(spec));
    w.submit_at_step.push_back(static_cast<int>(rng() % 80));
    w.abort_after.push_back(rng() % 6 == 0 ? static_cast<int>(rng() % 8) : -1);
  }
  return w;
}

struct RunResult {
  std::vector<std::vector<std::string>> deltas;
  std::vector<int> cached_tokens;  // per request, from its final delta
  MetricsSnapshot metrics;
  long tokens_computed = 0;
  long hit_tokens = 0;
};

// Through a cache that forces preemption and eviction; the cache's
// invariants are checked after every step.
RunResult run(const Workload& w, Mode mode) {
  Rig rig(mode, /*num_slots=*/12, /*num_blocks=*/28, /*max_seqs=*/10, /*budget=*/40,
          /*max_len=*/128);
  std::vector<std::unique_ptr<Recorder>> rec = drive(*rig.engine, w, [&] { rig.kv.check(); });
  EXPECT_EQ(rig.kv.slots_in_use(), 0);
  EXPECT_EQ(rig.kv.used_blocks(), 0);
  RunResult result;
  result.metrics = rig.engine->metrics();
  result.tokens_computed = rig.model.tokens_computed;
  result.hit_tokens = rig.kv.hit_tokens;
  for (auto& r : rec) {
    EXPECT_TRUE(r && r->finished);
    result.deltas.push_back(r ? r->deltas : std::vector<std::string>{});
    result.cached_tokens.push_back(r ? r->cached_tokens : -1);
  }
  return result;
}

TEST(PrefixCaching, StreamsEqualThoseWithoutCachingInEveryLoopMode) {
  const Workload w = shared_prefix_workload(200, 31);
  const RunResult off = run(w, {.caching = false, .async = false});
  EXPECT_GT(off.metrics.num_preemptions, 5u);
  EXPECT_GT(off.metrics.requests_finished[static_cast<int>(FinishReason::abort)], 5u);
  EXPECT_EQ(off.metrics.prefix_cache_hits, 0);
  EXPECT_GT(off.metrics.prefix_cache_queries, 0);  // looked up, nothing found
  for (int c : off.cached_tokens) EXPECT_EQ(c, 0);

  for (const Mode mode : {Mode{.caching = true, .async = false}, Mode{.caching = true},
                          Mode{.caching = true, .async = true, .worker = true},
                          Mode{.caching = false, .async = true, .worker = true}}) {
    SCOPED_TRACE(mode_name(mode));
    const RunResult got = run(w, mode);
    ASSERT_EQ(got.deltas.size(), off.deltas.size());
    int mismatches = 0;
    for (std::size_t i = 0; i < got.deltas.size() && mismatches < 5; ++i) {
      if (got.deltas[i] == off.deltas[i]) continue;
      ++mismatches;
      ADD_FAILURE() << "request " << i << " streams differently";
    }
    EXPECT_EQ(got.metrics.generation_tokens, off.metrics.generation_tokens);
    EXPECT_EQ(got.metrics.requests_finished, off.metrics.requests_finished);
    EXPECT_EQ(got.metrics.prefix_cache_hits, got.hit_tokens);
    if (!mode.caching) {
      EXPECT_EQ(got.metrics.prefix_cache_hits, 0);
      continue;
    }
    // Caching did something: a good share of the looked-up tokens were
    // found, the model computed that much less, and usage reports hits.
    EXPECT_GT(got.metrics.prefix_cache_hits, got.metrics.prefix_cache_queries / 5);
    EXPECT_LT(got.tokens_computed, off.tokens_computed);
    EXPECT_GT(got.metrics.num_preemptions, 0u);
    int with_hits = 0;
    for (std::size_t i = 0; i < got.cached_tokens.size(); ++i) {
      EXPECT_GE(got.cached_tokens[i], 0);
      EXPECT_LT(got.cached_tokens[i],
                static_cast<int>(w.specs[i].prompt_token_ids.size()));  // the last is computed
      EXPECT_EQ(got.cached_tokens[i] % kBlock, 0);
      with_hits += got.cached_tokens[i] > 0;
    }
    EXPECT_GT(with_hits, 20);
  }
}

RequestSpec greedy(std::vector<std::int32_t> prompt, int max_tokens) {
  RequestSpec spec;
  spec.prompt_token_ids = std::move(prompt);
  spec.sampling.temperature = 0.0f;
  spec.stop.max_tokens = max_tokens;
  spec.stop.ignore_eos = true;
  return spec;
}

std::vector<std::int32_t> prompt_of(int len, std::int32_t first) {
  std::vector<std::int32_t> p(len);
  for (int i = 0; i < len; ++i) p[i] = 1 + (first + 7 * i) % (kVocab - 1);
  return p;
}

// Runs one request to its end; returns its final delta and all its tokens.
RequestOutput run_one(Rig& rig, const RequestSpec& spec, std::vector<std::int32_t>* tokens) {
  auto stream = *rig.engine->submit(spec);
  while (rig.engine->has_work()) rig.engine->step();
  RequestOutput out, last;
  while (stream->try_pop(out)) {
    if (tokens) tokens->insert(tokens->end(), out.token_ids.begin(), out.token_ids.end());
    last = out;
  }
  EXPECT_TRUE(last.finished);
  return last;
}

// The same prompt twice: the second finds every full block but the one
// holding its last token; usage, the counters and /metrics say so; a
// different salt finds nothing.
TEST(PrefixCaching, UsageAndCountersReportTheHits) {
  Rig rig({.caching = true}, 8, 128, 8, 64, 256);
  const RequestSpec spec = greedy(prompt_of(45, 3), 5);
  std::vector<std::int32_t> first, second, salted;
  EXPECT_EQ(run_one(rig, spec, &first).num_cached_tokens, 0);
  const RequestOutput again = run_one(rig, spec, &second);
  EXPECT_EQ(again.num_cached_tokens, 40);
  EXPECT_EQ(again.num_prompt_tokens, 45);
  EXPECT_EQ(second, first);
  RequestSpec other = spec;
  other.cache_salt = "tenant";
  EXPECT_EQ(run_one(rig, other, &salted).num_cached_tokens, 0);
  EXPECT_EQ(salted, first);
  const MetricsSnapshot m = rig.engine->metrics();
  EXPECT_EQ(m.prefix_cache_queries, 3 * 45);
  EXPECT_EQ(m.prefix_cache_hits, 40);
  const std::string text = format_prometheus(m, "m");
  for (const char* line : {"# TYPE vllm:prefix_cache_queries_total counter",
                           "vllm:prefix_cache_queries_total{model_name=\"m\",engine=\"0\"} 135",
                           "# TYPE vllm:prefix_cache_hits_total counter",
                           "vllm:prefix_cache_hits_total{model_name=\"m\",engine=\"0\"} 40"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

// Without prefix caching in the scheduler, nothing is looked up (and nothing
// counted), even over a store that caches.
TEST(PrefixCaching, OffLooksNothingUp) {
  SlotMemory memory;
  FakeKvCache kv(4, 64, kBlock, 256, &memory, /*prefix_caching=*/true);
  HashModel model(&memory, kVocab);
  ByteDecoderFactory decoders(word_pieces(kVocab));
  EngineConfig config;
  config.scheduler = {.max_num_seqs = 4, .max_num_batched_tokens = 64, .prefix_caching = false};
  config.vocab_size = kVocab;
  auto engine = std::move(Engine::create(config, model, kv, decoders)).value();
  for (int i = 0; i < 2; ++i) {
    auto stream = *engine->submit(greedy(prompt_of(45, 3), 5));
    while (engine->has_work()) engine->step();
  }
  EXPECT_EQ(kv.hit_tokens, 0);
  EXPECT_EQ(engine->metrics().prefix_cache_queries, 0);
  EXPECT_EQ(engine->metrics().prefix_cache_hits, 0);
}

// Usage reports the first admission's cached tokens: a request that hit two
// blocks, was preempted and came back finding more (its own prompt blocks)
// still reports two blocks.
TEST(PrefixCaching, UsageKeepsTheFirstAdmissionsHitAcrossPreemption) {
  Rig rig({.caching = true, .async = false}, 8, 24, 8, 64, 192);
  const std::vector<std::int32_t> system = prompt_of(20, 5);
  run_one(rig, greedy(system, 2), nullptr);  // caches two blocks of the system prompt
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 2; ++i)
    others.push_back(*rig.engine->submit(greedy(prompt_of(40, 11 + i), 70)));
  std::vector<std::int32_t> prompt = system;
  for (std::int32_t t : prompt_of(30, 29)) prompt.push_back(t);
  const RequestSpec spec = greedy(prompt, 40);
  auto stream = *rig.engine->submit(spec);
  const long hits_before = rig.kv.hit_tokens;
  while (rig.engine->has_work()) rig.engine->step();
  EXPECT_GT(rig.engine->metrics().num_preemptions, 0u);
  EXPECT_GT(rig.kv.hit_tokens - hits_before, 16) << "the readmission was meant to hit more";
  RequestOutput out, last;
  std::vector<std::int32_t> tokens;
  while (stream->try_pop(out)) {
    tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
    last = out;
  }
  ASSERT_TRUE(last.finished);
  EXPECT_EQ(last.num_cached_tokens, 16);
  Rig solo({.caching = false}, 2, 64, 2, 64, 192);
  std::vector<std::int32_t> alone;
  run_one(solo, spec, &alone);
  EXPECT_EQ(tokens, alone);
}

}  // namespace
}  // namespace vpod::engine
