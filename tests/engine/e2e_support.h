// The end-to-end checks of the engine over the real model, tokenizer and
// KV store - the vAttention cache or the paged baseline (Env::kv_cache) -
// written once and run by e2e_test.cpp (CPU backend, host VMM, the tiny
// model) and e2e_gpu_test.cpp (CUDA backend, CUDA VMM, a 4-layer Llama-3
// shaped model):
//   - many concurrent requests through a KV budget too small for all of them:
//     preemptions happen, all finish, each greedy output equals the same
//     request run alone;
//   - an abort mid-generation frees the slot at the next step;
//   - a stop string straddling a token boundary is held back and cut;
//   - prefix caching: requests that share a long system prompt map its cached
//     K/V instead of computing it, and generate what they generate cold.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/async_executor.h"
#include "engine/engine.h"
#include "engine/engine_stack.h"
#include "engine/model_runner.h"
#include "engine/tokenizer_decoder.h"
#include "kvcache/host_vmm.h"
#include "kvcache/kv_cache.h"
#include "kvcache/paged_kv_cache.h"
#include "model/make_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace vpod::engine::e2e {

namespace fs = std::filesystem;

// What differs between the CPU and the GPU runs.
struct Env {
  std::unique_ptr<model::Backend> backend;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::function<Result<std::shared_ptr<kvcache::VmmProvider>>()> make_provider;
  // The KV store the stacks build: vAttention over make_provider's VMM, or
  // the paged baseline (blocks of `block_size` tokens in `device` memory).
  KvCacheKind kv_cache = KvCacheKind::vattn;
  int block_size = 16;
  Device device = Device::cpu;
  fs::path dir;
  int max_num_seqs = 32;
  int max_num_batched_tokens = 256;
  int max_ctx = 256;
  // The concurrent workload: prompt texts repeated this many times (range),
  // and output lengths.
  int min_repeats = 1, max_repeats = 4;
  int min_out = 6, max_out = 20;
  // The concurrent run's KV budget: the workload's tokens divided by this.
  int kv_divisor = 6;
  // Tokens the background mapper maps ahead of each step (promised too, so a
  // large lookahead leaves decodes little to grow into: fewer preemptions).
  int lookahead_tokens = 2;
  // How a batched greedy output is compared with the same request run alone.
  // Exact (the CPU backend's kernels do not depend on the batch): the tokens
  // are identical. Otherwise (bf16 on the GPU, where the GEMM kernel and the
  // attention splits depend on the batch, so logits differ in their last
  // bits): identical up to a first difference, and there the two runs' tokens
  // must be a near tie: each in the other's top-5, within `near_tie_nats`.
  bool exact_solo_match = true;
  float near_tie_nats = 0.0f;
  // Structured output for the engines (EngineConfig::grammar); null: none.
  std::shared_ptr<grammar::GrammarCompiler> grammar;
};

// Writes `preset` with random weights (and its tokenizer) and loads it.
inline Status load_env(Env& env, const std::string& preset,
                       std::unique_ptr<model::Backend> backend) {
  env.dir =
      fs::temp_directory_path() / ("vpod_engine_e2e_" + preset + "_" + std::to_string(::getpid()));
  model::MakeModelOptions options;
  options.out_dir = env.dir;
  options.preset = preset;
  options.seed = 7;
  options.num_threads = 2;
  VPOD_RETURN_IF_ERROR(model::make_model(options).status());
  env.backend = std::move(backend);
  VPOD_ASSIGN_OR_RETURN(env.model, model::Model::load(env.dir, *env.backend,
                                                      {.max_num_tokens = env.max_num_batched_tokens,
                                                       .max_num_sequences = env.max_num_seqs}));
  VPOD_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(env.dir));
  env.tok = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
  return {};
}

// The CPU suites' environment: the tiny model on the CPU backend over the
// host VMM provider (4 KiB pages, the OS page: 16 tokens of the tiny
// model's fp32 K or V). Returns why the suite cannot run: "" when loaded, a
// skip reason without fixtures, "loading ..." (a failure) otherwise.
inline std::string load_cpu_tiny_env(Env& env) {
  if (model::find_fixtures_dir().empty()) return "no tokenizer fixtures (set VPOD_FIXTURES)";
  env.make_provider = []() -> Result<std::shared_ptr<kvcache::VmmProvider>> {
    VPOD_ASSIGN_OR_RETURN(auto p, kvcache::HostVmmProvider::create(4096));
    return std::shared_ptr<kvcache::VmmProvider>(std::move(p));
  };
  const Status loaded = load_env(env, "tiny", model::make_cpu_backend(2));
  return loaded.ok() ? "" : "loading the tiny model failed: " + loaded.to_string();
}

// How the engine loop runs: pipelined (EngineConfig::async_scheduling) or
// not, and whether the model runs on an AsyncExecutor's worker thread (as
// vpod serve runs it by default).
struct LoopMode {
  bool async = true;
  bool worker = true;
};

// One engine over its own KV store (Env::kv_cache).
struct Stack {
  // `kv_tokens`: the KV budget in tokens, rounded up to whole pages (blocks).
  // `prefix_caching`: the store indexes computed prompt blocks and admission
  // maps them into later requests that start with the same tokens.
  Stack(Env& env, std::int64_t kv_tokens, int max_slots, LoopMode mode = {},
        bool prefix_caching = false) {
    const model::ModelConfig& mc = env.model->config();
    const kvcache::KvShape shape{.num_layers = mc.num_layers,
                                 .num_kv_heads = mc.num_kv_heads,
                                 .head_dim = mc.head_dim,
                                 .dtype = env.model->kv_dtype()};
    constexpr std::uint64_t kSalt = 0x7e57;  // one model: any salt
    if (env.kv_cache == KvCacheKind::paged) {
      const std::int64_t blocks = (kv_tokens + env.block_size - 1) / env.block_size;
      auto created = kvcache::PagedKvCache::create(
          {.shape = shape,
           .block_size = env.block_size,
           .max_slots = max_slots,
           .max_ctx = env.max_ctx,
           .memory_bytes =
               static_cast<std::size_t>(blocks * env.block_size) * shape.bytes_per_token(),
           .device = env.device,
           .prefix_caching = prefix_caching,
           .prefix_salt = kSalt});
      EXPECT_TRUE(created.ok()) << created.status().to_string();
      paged = created->get();
      store = std::move(created).value();
    } else {
      auto provider = env.make_provider();
      EXPECT_TRUE(provider.ok()) << provider.status().to_string();
      // All-layers layout: 2 regions (K, V), each token_bytes / 2 per token.
      const std::size_t page = (*provider)->page_bytes();
      const std::size_t region_bytes =
          static_cast<std::size_t>(kv_tokens) * shape.bytes_per_token() / 2;
      const std::size_t pages = (region_bytes + page - 1) / page;
      auto created = kvcache::KvCache::create({.shape = shape,
                                               .max_slots = max_slots,
                                               .max_ctx = env.max_ctx,
                                               .memory_bytes = 2 * pages * page,
                                               .growth = kvcache::GrowthMode::background,
                                               .lookahead_tokens = env.lookahead_tokens,
                                               .prefix_caching = prefix_caching,
                                               .prefix_salt = kSalt},
                                              *provider);
      EXPECT_TRUE(created.ok()) << created.status().to_string();
      vattn = created->get();
      store = std::move(created).value();
    }
    capacity = store.get();  // the scheduler admits against the store itself
    runner = std::make_unique<ModelRunner>(*env.model, store->view());
    if (mode.worker) worker = std::make_unique<AsyncExecutor>(*runner);
    decoders = std::make_unique<TokenizerDecoderFactory>(*env.tok);
    EngineConfig config;
    config.scheduler = {.max_num_seqs = env.max_num_seqs,
                        .max_num_batched_tokens = env.max_num_batched_tokens};
    config.max_model_len = env.max_ctx;
    config.vocab_size = mc.vocab_size;
    config.eos_token_ids = env.model->generation_config().eos_token_ids;
    config.async_scheduling = mode.async;
    config.grammar = env.grammar;
    ModelExecutor& executor = worker ? static_cast<ModelExecutor&>(*worker) : *runner;
    auto e = Engine::create(config, executor, *capacity, *decoders);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    engine = std::move(e).value();
  }
  bool run(int max_steps = 1000000) {
    for (int i = 0; i < max_steps && engine->has_work(); ++i) engine->step();
    return !engine->has_work();
  }
  // Once the engine is idle: background work settled (vAttention's mapper),
  // no slot active, nothing promised, the store's own invariants hold.
  void expect_idle_and_consistent() {
    if (vattn) vattn->drain();
    EXPECT_EQ(store->stats().active_slots, 0);
    EXPECT_EQ(capacity->used_units(), 0);
    const Status ok = vattn ? vattn->check_invariants() : paged->check_invariants();
    EXPECT_TRUE(ok.ok()) << ok.to_string();
  }

  std::unique_ptr<kvcache::KvStore> store;
  kvcache::KvCache* vattn = nullptr;       // = store.get() for --kv-cache vattn
  kvcache::PagedKvCache* paged = nullptr;  // = store.get() for --kv-cache paged
  kvcache::KvStore* capacity = nullptr;    // = store.get()
  std::unique_ptr<ModelRunner> runner;
  std::unique_ptr<AsyncExecutor> worker;
  std::unique_ptr<TokenizerDecoderFactory> decoders;
  std::unique_ptr<Engine> engine;
};

struct Output {
  std::vector<std::int32_t> tokens;
  std::string text;
  std::vector<SampledToken> logprobs;  // parallel to tokens when requested
  RequestOutput last;
};

inline Output collect(RequestStream& stream) {
  Output r;
  RequestOutput out;
  while (stream.try_pop(out)) {
    r.tokens.insert(r.tokens.end(), out.token_ids.begin(), out.token_ids.end());
    r.text += out.text;
    r.logprobs.insert(r.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
    r.last = out;
  }
  return r;
}

// The logprob `token` has in `sampled`'s top list, if it is there.
inline std::optional<float> top_logprob(const SampledToken& sampled, std::int32_t token) {
  for (int k = 0; k < sampled.num_top; ++k)
    if (sampled.top[k].token == token) return sampled.top[k].logprob;
  return std::nullopt;
}

// Compares a batched greedy output with the solo run as env says (see Env);
// returns whether they are identical.
inline bool expect_matches_solo(const Env& env, const Output& got, const Output& solo, int i) {
  if (env.exact_solo_match || got.tokens == solo.tokens) {
    EXPECT_EQ(got.tokens, solo.tokens) << "request " << i;
    EXPECT_EQ(got.text, solo.text) << "request " << i;
    return got.tokens == solo.tokens;
  }
  EXPECT_EQ(got.tokens.size(), solo.tokens.size()) << "request " << i;
  const std::size_t n = std::min(got.tokens.size(), solo.tokens.size());
  std::size_t d = 0;
  while (d < n && got.tokens[d] == solo.tokens[d]) ++d;
  if (d == n) return false;
  if (d >= got.logprobs.size() || d >= solo.logprobs.size()) {
    ADD_FAILURE() << "request " << i << ": no logprobs at token " << d;
    return false;
  }
  // Past the first difference the runs condition on different tokens.
  const SampledToken& s = solo.logprobs[d];
  const SampledToken& g = got.logprobs[d];
  const std::optional<float> got_in_solo = top_logprob(s, got.tokens[d]);
  const std::optional<float> solo_in_got = top_logprob(g, solo.tokens[d]);
  EXPECT_TRUE(got_in_solo && solo_in_got)
      << "request " << i << " parts from its solo run at token " << d << " (batched " << g.token
      << ", solo " << s.token << ") and the two are not in each other's top " << s.num_top;
  if (got_in_solo && solo_in_got) {
    EXPECT_LE(s.logprob - *got_in_solo, env.near_tie_nats)
        << "request " << i << " token " << d << ": solo run's margin";
    EXPECT_LE(g.logprob - *solo_in_got, env.near_tie_nats)
        << "request " << i << " token " << d << ": batched run's margin";
  }
  return false;
}

// Runs `spec` alone in an engine with room for it.
inline Output alone(Env& env, const RequestSpec& spec) {
  Stack stack(env, 2 * env.max_ctx, /*max_slots=*/2);
  auto stream = stack.engine->submit(spec);
  EXPECT_TRUE(stream.ok()) << stream.status().to_string();
  EXPECT_TRUE(stack.run());
  return collect(**stream);
}

inline RequestSpec greedy(Env& env, const std::string& text, int max_tokens) {
  RequestSpec spec;
  spec.prompt_token_ids = std::move(env.tok->encode(text, true)).value();
  spec.sampling.temperature = 0.0f;
  spec.stop.max_tokens = max_tokens;
  spec.stop.ignore_eos = true;  // random weights: run to max_tokens
  if (!env.exact_solo_match) spec.sampling.logprobs = 5;
  return spec;
}

inline const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "The quick brown fox jumps over the lazy dog.",
      "In 1905 Einstein published four papers that changed physics:",
      "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
      "Serving large language models efficiently requires batching prefill and decode",
      "東京は日本の首都です。",
      "Once upon a time",
      "SELECT name, count(*) FROM users GROUP BY name ORDER BY 2 DESC;",
      "vAttention keeps the KV cache virtually contiguous",
  };
  return t;
}

// 64 concurrent requests through a KV budget of a fraction of what they need.
inline void check_concurrent_requests_match_solo_runs(Env& env) {
  std::mt19937 rng(2024);
  std::vector<RequestSpec> specs;
  std::int64_t total_tokens = 0;
  for (int i = 0; i < 64; ++i) {
    std::string text = texts()[i % texts().size()];
    const int repeats =
        env.min_repeats + static_cast<int>(rng() % (env.max_repeats - env.min_repeats + 1));
    for (int k = 1; k < repeats; ++k) {
      text.push_back(' ');
      text.append(texts()[rng() % texts().size()]);
    }
    RequestSpec spec =
        greedy(env, text, env.min_out + static_cast<int>(rng() % (env.max_out - env.min_out + 1)));
    ASSERT_LT(static_cast<int>(spec.prompt_token_ids.size()) + spec.stop.max_tokens, env.max_ctx);
    total_tokens += static_cast<std::int64_t>(spec.prompt_token_ids.size()) + spec.stop.max_tokens;
    specs.push_back(std::move(spec));
  }
  Stack stack(env, std::max<std::int64_t>(total_tokens / env.kv_divisor, env.max_ctx),
              /*max_slots=*/64);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const RequestSpec& s : specs) {
    auto stream = stack.engine->submit(s);
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    streams.push_back(*stream);
  }
  ASSERT_TRUE(stack.run());
  const MetricsSnapshot m = stack.engine->metrics();
  EXPECT_GT(m.num_preemptions, 0u) << "the KV budget was meant to force preemptions";
  ::testing::Test::RecordProperty("workload_tokens", static_cast<int>(total_tokens));
  ::testing::Test::RecordProperty("kv_capacity_tokens",
                                  static_cast<int>(stack.capacity->capacity_tokens()));
  ::testing::Test::RecordProperty("preemptions", static_cast<int>(m.num_preemptions));
  ::testing::Test::RecordProperty("steps", static_cast<int>(m.num_steps));
  int identical = 0;
  for (int i = 0; i < 64; ++i) {
    const Output got = collect(*streams[i]);
    ASSERT_TRUE(got.last.finished) << "request " << i;
    EXPECT_EQ(got.last.finish_reason, FinishReason::length) << got.last.error;
    const Output solo = alone(env, specs[i]);
    identical += expect_matches_solo(env, got, solo, i);
    EXPECT_EQ(got.text, std::move(env.tok->decode(got.tokens, true)).value());
  }
  ::testing::Test::RecordProperty("identical_to_solo", identical);
  std::printf("%d of 64 requests identical to their solo runs\n", identical);
  stack.expect_idle_and_consistent();
}

inline void check_abort_frees_the_slot(Env& env, LoopMode mode = {}) {
  Stack stack(env, 2 * env.max_ctx, /*max_slots=*/1, mode);  // one slot: the second waits
  auto first = *stack.engine->submit(greedy(env, "Once upon a time", env.max_ctx / 2));
  const RequestSpec second_spec = greedy(env, "The quick brown fox", 6);
  auto second = *stack.engine->submit(second_spec);
  for (int i = 0; i < 4; ++i) stack.engine->step();
  Output r1 = collect(*first);
  EXPECT_EQ(r1.tokens.size(), mode.async ? 3u : 4u);  // pipelined: the 4th is in flight
  EXPECT_EQ(stack.store->stats().active_slots, 1);
  EXPECT_EQ(stack.engine->scheduler().num_waiting(), 1u);
  stack.engine->abort(first->id());
  stack.engine->step();  // the abort frees the slot; the second request takes it
  r1 = collect(*first);
  EXPECT_TRUE(r1.last.finished);
  EXPECT_EQ(r1.last.finish_reason, FinishReason::abort);
  EXPECT_TRUE(r1.tokens.empty()) << "tokens generated after the abort";
  EXPECT_EQ(stack.engine->scheduler().num_waiting(), 0u);
  EXPECT_EQ(stack.engine->scheduler().num_running(), 1u);
  ASSERT_TRUE(stack.run());
  EXPECT_EQ(collect(*second).tokens, alone(env, second_spec).tokens);
  stack.expect_idle_and_consistent();
}

// Prefix caching through the whole stack. A system prompt of 60% of the
// context (one or more of the store's prefix blocks: a depth step of pages
// for vAttention, 1,024 tokens on the GPU suite's model; a block for the
// paged cache), a first request that
// computes it, then seven at once that share it (one repeats the first
// prompt outright). The first reports no cached tokens; each later one a
// whole number of blocks covering the system prompt's whole blocks, and it
// generates what it generates alone in a store without caching (Env's
// comparison). Once all have finished the cached blocks stay indexed and
// evictable (held by no active slot), and nothing is promised.
inline void check_prefix_hits_match_cold_runs(Env& env) {
  std::mt19937 rng(77);
  const int target = env.max_ctx * 3 / 5;
  std::string text;
  std::vector<std::int32_t> system;
  for (std::size_t k = 0; static_cast<int>(system.size()) < target; ++k) {
    if (!text.empty()) text.push_back(' ');
    text.append(texts()[(k * 5 + 3) % texts().size()]);
    system = std::move(env.tok->encode(text, true)).value();
  }
  system.resize(target);
  const int out = env.min_out;
  auto with_suffix = [&](const std::string& suffix) {
    RequestSpec spec = greedy(env, suffix, out);
    std::vector<std::int32_t> ids = std::move(env.tok->encode(" " + suffix, false)).value();
    spec.prompt_token_ids = system;
    spec.prompt_token_ids.insert(spec.prompt_token_ids.end(), ids.begin(), ids.end());
    EXPECT_LT(static_cast<int>(spec.prompt_token_ids.size()) + out, env.max_ctx);
    return spec;
  };
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 7; ++i) specs.push_back(with_suffix(texts()[(i + rng()) % texts().size()]));
  specs.push_back(specs.front());  // the first prompt again: a hit on all its whole blocks

  const std::int64_t kv_tokens = static_cast<std::int64_t>(specs.size()) * env.max_ctx;
  Stack stack(env, kv_tokens, /*max_slots=*/8, {}, /*prefix_caching=*/true);
  const int block = stack.vattn ? stack.vattn->prefix_block_tokens() : env.block_size;
  ASSERT_TRUE(stack.paged || stack.vattn->prefix_caching())
      << "the vAttention cache turned prefix caching off for these shapes";
  ASSERT_GE(static_cast<int>(system.size()), block) << "the shared prompt spans no whole block";

  auto first = *stack.engine->submit(specs.front());
  ASSERT_TRUE(stack.run());
  std::vector<Output> got{collect(*first)};
  EXPECT_EQ(got[0].last.num_cached_tokens, 0);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (std::size_t i = 1; i < specs.size(); ++i) {
    auto stream = stack.engine->submit(specs[i]);
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    streams.push_back(*stream);
  }
  ASSERT_TRUE(stack.run());
  for (const auto& stream : streams) got.push_back(collect(*stream));

  const int shared_blocks = static_cast<int>(system.size()) / block;
  int identical = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(got[i].last.finished) << "request " << i;
    EXPECT_EQ(got[i].last.finish_reason, FinishReason::length) << got[i].last.error;
    const int cached = got[i].last.num_cached_tokens;
    if (i > 0) {
      EXPECT_EQ(cached % block, 0) << "request " << i << ": " << cached << " cached tokens";
      EXPECT_GE(cached, shared_blocks * block) << "request " << i;
      EXPECT_LT(cached, static_cast<int>(specs[i].prompt_token_ids.size())) << "request " << i;
    }
    identical += expect_matches_solo(env, got[i], alone(env, specs[i]), static_cast<int>(i));
  }
  std::printf("%d of %zu prefix-cached requests identical to their cold solo runs (block %d)\n",
              identical, specs.size(), block);
  stack.expect_idle_and_consistent();
  const kvcache::KvStats stats = stack.store->stats();
  EXPECT_GE(stats.prefix_blocks_cached, shared_blocks);
  // Evictable: the paged cache's blocks wait unreferenced in its LRU list;
  // vAttention's stay mapped in the idle slots that computed or matched them
  // (no active slot holds one), where reclaiming those slots' tails frees them.
  if (stack.paged) {
    EXPECT_EQ(stats.prefix_blocks_unreferenced, stats.prefix_blocks_cached);
  }
}

// Finds, in some request's greedy output, a 4-byte ASCII window that
// straddles a token boundary and occurs nowhere earlier, and uses it as the
// stop string.
inline void check_stop_string_across_tokens(Env& env) {
  for (const std::string& prompt : texts()) {
    const RequestSpec base = greedy(env, prompt, 24);
    const Output full = alone(env, base);
    for (std::size_t k = 1; k < full.tokens.size(); ++k) {
      const std::string head =
          std::move(env.tok->decode(std::span(full.tokens).first(k), true)).value();
      if (head.size() < 2 || full.text.compare(0, head.size(), head) != 0) continue;
      if (head.size() + 2 > full.text.size()) continue;
      const std::string stop = full.text.substr(head.size() - 2, 4);
      if (!std::all_of(stop.begin(), stop.end(),
                       [](char c) { return c > ' ' && static_cast<unsigned char>(c) < 0x7f; }))
        continue;
      if (full.text.find(stop) != head.size() - 2) continue;
      // Token k-1's text ends with stop[0, 2); token k's starts with stop[2, 4).
      RequestSpec with_stop = base;
      with_stop.stop.stop = {stop};
      Stack stack(env, 2 * env.max_ctx, 2);
      auto stream = *stack.engine->submit(with_stop);
      std::string streamed;
      RequestOutput out, last;
      while (stack.engine->has_work()) {
        stack.engine->step();
        while (stream->try_pop(out)) {
          // Deltas are never taken back: the stop's first bytes must never
          // have been sent, not even in the step before the stop completed.
          streamed += out.text;
          EXPECT_EQ(full.text.compare(0, streamed.size(), streamed), 0);
          EXPECT_LE(streamed.size(), head.size() - 2) << "sent part of the stop string";
          last = out;
        }
      }
      EXPECT_EQ(streamed, full.text.substr(0, head.size() - 2));
      EXPECT_EQ(last.finish_reason, FinishReason::stop);
      EXPECT_EQ(last.stop_string, stop);
      EXPECT_EQ(last.num_generated_tokens, static_cast<int>(k) + 1);
      // With include_stop_str_in_output the stop itself is kept.
      with_stop.stop.include_stop_str_in_output = true;
      Stack again(env, 2 * env.max_ctx, 2);
      auto s2 = *again.engine->submit(with_stop);
      ASSERT_TRUE(again.run());
      EXPECT_EQ(collect(*s2).text, full.text.substr(0, head.size() + 2));
      return;
    }
  }
  FAIL() << "no straddling ASCII stop string found in the outputs";
}

// Every field of a delta, as one comparable line.
inline std::string describe(const RequestOutput& d) {
  std::string s = "tokens=";
  for (std::int32_t t : d.token_ids) s += std::to_string(t) + ",";
  s += " text='" + d.text + "' logprobs=";
  for (const SampledToken& t : d.logprobs)
    s += std::to_string(t.token) + ":" + std::to_string(t.logprob) + " ";
  s += " finished=" + std::to_string(d.finished) +
       " reason=" + std::string(finish_reason_name(d.finish_reason)) + " stop='" + d.stop_string +
       "' stop_token=" + std::to_string(d.stop_token.value_or(-1)) + " error='" + d.error +
       "' n=" + std::to_string(d.num_generated_tokens);
  return s;
}

// The pipelined loop (with and without the worker thread) streams exactly
// what the synchronous loop streams, delta for delta, on the real model,
// tokenizer and cache: greedy and seeded requests, stop strings taken from
// the outputs (so they are hit, often across tokens), clients aborting after
// a few tokens, and a KV budget that forces preemptions. Exact: only for
// backends whose results do not depend on the batch (the CPU).
inline void check_pipelined_streams_equal_synchronous(Env& env) {
  std::mt19937 rng(99);
  std::vector<RequestSpec> specs;
  std::vector<int> abort_after;
  std::int64_t total_tokens = 0;
  for (int i = 0; i < 16; ++i) {
    std::string text = texts()[i % texts().size()];
    if (i % 3 == 0) text += " " + texts()[rng() % texts().size()];
    // Outputs long enough that the running requests outgrow the budget
    // (max_ctx on the CPU suite) and preempt, with either store.
    RequestSpec spec = greedy(env, text, 16 + static_cast<int>(rng() % 24));
    if (i % 2 == 1) {
      spec.sampling.temperature = 0.9f;
      spec.sampling.seed = 1000 + i;
    }
    if (i % 4 == 0) spec.sampling.logprobs = 2;
    total_tokens += static_cast<std::int64_t>(spec.prompt_token_ids.size()) + spec.stop.max_tokens;
    specs.push_back(std::move(spec));
    abort_after.push_back(i % 5 == 4 ? 1 + static_cast<int>(rng() % 4) : -1);
  }
  const std::int64_t kv_tokens = std::max<std::int64_t>(total_tokens / 4, env.max_ctx);

  struct Recorder {
    std::shared_ptr<RequestStream> stream;
    std::vector<std::string> deltas;
    std::string text;
    int num_tokens = 0;
    bool finished = false;
    RequestOutput out;
    void on_output() {
      while (stream && stream->try_pop(out)) {
        deltas.push_back(describe(out));
        text += out.text;
        num_tokens += static_cast<int>(out.token_ids.size());
        finished = finished || out.finished;
      }
    }
  };
  struct Run {
    std::vector<std::unique_ptr<Recorder>> rec;
    MetricsSnapshot metrics;
  };
  auto run = [&](LoopMode mode, bool aborts) {
    Stack stack(env, kv_tokens, /*max_slots=*/16, mode);
    Run r;
    for (const RequestSpec& spec : specs) {
      auto rec = std::make_unique<Recorder>();
      Recorder* p = rec.get();
      auto stream = stack.engine->submit(spec, [p] { p->on_output(); });
      EXPECT_TRUE(stream.ok()) << stream.status().to_string();
      p->stream = *stream;
      r.rec.push_back(std::move(rec));
    }
    std::vector<bool> aborted(specs.size(), false);
    for (int step = 0; step < 100000 && stack.engine->has_work(); ++step) {
      for (std::size_t i = 0; aborts && i < specs.size(); ++i) {
        if (aborted[i] || abort_after[i] < 0 || r.rec[i]->finished) continue;
        if (r.rec[i]->num_tokens >= abort_after[i]) {
          stack.engine->abort(r.rec[i]->stream->id());
          aborted[i] = true;
        }
      }
      stack.engine->step();
    }
    EXPECT_FALSE(stack.engine->has_work());
    EXPECT_EQ(stack.capacity->used_units(), 0);
    r.metrics = stack.engine->metrics();
    return r;
  };

  // Stop strings from a first run's outputs: 3 ASCII bytes from the middle
  // of the text (the stop may span tokens; an earlier occurrence stops earlier).
  const Run plain = run({.async = false, .worker = false}, /*aborts=*/false);
  int with_stop = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string& text = plain.rec[i]->text;
    for (std::size_t pos = text.size() / 2; pos + 3 <= text.size(); ++pos) {
      const std::string stop = text.substr(pos, 3);
      if (std::all_of(stop.begin(), stop.end(),
                      [](char c) { return c > ' ' && static_cast<unsigned char>(c) < 0x7f; })) {
        specs[i].stop.stop = {stop};
        specs[i].stop.include_stop_str_in_output = i % 4 == 1;
        ++with_stop;
        break;
      }
    }
  }
  EXPECT_GT(with_stop, 8);

  const Run sync = run({.async = false, .worker = false}, /*aborts=*/true);
  std::printf("synchronous run: %llu preemptions, %llu stop, %llu length, %llu abort\n",
              static_cast<unsigned long long>(sync.metrics.num_preemptions),
              static_cast<unsigned long long>(sync.metrics.requests_finished[1]),
              static_cast<unsigned long long>(sync.metrics.requests_finished[2]),
              static_cast<unsigned long long>(sync.metrics.requests_finished[3]));
  EXPECT_GT(sync.metrics.num_preemptions, 0u) << "the KV budget was meant to force preemptions";
  EXPECT_GT(sync.metrics.requests_finished[static_cast<int>(FinishReason::stop)], 5u);
  EXPECT_GT(sync.metrics.requests_finished[static_cast<int>(FinishReason::abort)], 1u);
  for (const LoopMode mode :
       {LoopMode{.async = true, .worker = false}, LoopMode{.async = true, .worker = true}}) {
    SCOPED_TRACE(mode.worker ? "pipelined + worker" : "pipelined");
    const Run got = run(mode, /*aborts=*/true);
    for (std::size_t i = 0; i < specs.size(); ++i)
      EXPECT_EQ(got.rec[i]->deltas, sync.rec[i]->deltas) << "request " << i;
    EXPECT_GT(got.metrics.step_time_total.host_hidden_s, 0.0);
  }
}

// Without stop strings and aborts the pipelined loop plans exactly the
// synchronous loop's steps (the token-only stop rules run before the next
// schedule), so the two compute the same batches: a check of the
// worker-thread path on any backend. `n` requests from the concurrent
// workload through a KV budget that preempts. Exact backends (the CPU): half
// of them seeded sampling, and every delta must be identical. Otherwise (the
// GPU, where bit-for-bit repeatability of the kernels is not promised): all
// greedy with logprobs, identical except where a run parts at a near tie
// (expect_matches_solo); a race on the step's inputs would part elsewhere.
inline void check_pipelined_equals_synchronous_on_the_same_schedule(Env& env, int n) {
  std::mt19937 rng(7);
  std::vector<RequestSpec> specs;
  std::int64_t total_tokens = 0;
  for (int i = 0; i < n; ++i) {
    std::string text = texts()[i % texts().size()];
    const int repeats =
        env.min_repeats + static_cast<int>(rng() % (env.max_repeats - env.min_repeats + 1));
    for (int k = 1; k < repeats; ++k) text += " " + texts()[rng() % texts().size()];
    RequestSpec spec =
        greedy(env, text, env.min_out + static_cast<int>(rng() % (env.max_out - env.min_out + 1)));
    if (env.exact_solo_match) {
      if (i % 2 == 1) {
        spec.sampling.temperature = 1.0f;
        spec.sampling.seed = 500 + i;
      }
      if (i % 3 == 0) spec.sampling.logprobs = 3;
    }
    total_tokens += static_cast<std::int64_t>(spec.prompt_token_ids.size()) + spec.stop.max_tokens;
    specs.push_back(std::move(spec));
  }
  const std::int64_t kv_tokens = std::max<std::int64_t>(total_tokens / env.kv_divisor, env.max_ctx);
  struct Run {
    std::vector<std::vector<std::string>> deltas;
    std::vector<Output> outputs;
    MetricsSnapshot metrics;
  };
  auto run = [&](LoopMode mode) {
    Stack stack(env, kv_tokens, /*max_slots=*/n, mode);
    Run r;
    r.deltas.resize(specs.size());
    r.outputs.resize(specs.size());
    std::vector<std::shared_ptr<RequestStream>> streams(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto* deltas = &r.deltas[i];
      auto* output = &r.outputs[i];
      auto* stream = &streams[i];
      auto submitted = stack.engine->submit(specs[i], [deltas, output, stream] {
        RequestOutput out;
        while (*stream && (*stream)->try_pop(out)) {
          deltas->push_back(describe(out));
          output->tokens.insert(output->tokens.end(), out.token_ids.begin(), out.token_ids.end());
          output->text += out.text;
          output->logprobs.insert(output->logprobs.end(), out.logprobs.begin(), out.logprobs.end());
          output->last = out;
        }
      });
      EXPECT_TRUE(submitted.ok()) << submitted.status().to_string();
      streams[i] = *submitted;
    }
    EXPECT_TRUE(stack.run());
    r.metrics = stack.engine->metrics();
    return r;
  };
  const Run sync = run({.async = false, .worker = false});
  const Run pipelined = run({.async = true, .worker = true});
  EXPECT_GT(sync.metrics.num_preemptions, 0u) << "the KV budget was meant to force preemptions";
  int identical = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(sync.outputs[i].last.finished) << "request " << i;
    if (pipelined.deltas[i] == sync.deltas[i]) {
      ++identical;
    } else if (env.exact_solo_match) {
      ADD_FAILURE() << "request " << i << " streams differently when pipelined";
    } else {
      expect_matches_solo(env, pipelined.outputs[i], sync.outputs[i], static_cast<int>(i));
    }
  }
  if (identical == n) {  // the same tokens: the same schedule
    EXPECT_EQ(pipelined.metrics.num_preemptions, sync.metrics.num_preemptions);
    EXPECT_EQ(pipelined.metrics.num_steps, sync.metrics.num_steps);
  }
  const StepTimes& a = pipelined.metrics.step_time_total;
  const StepTimes& b = sync.metrics.step_time_total;
  std::printf(
      "%d of %d identical; %llu / %llu steps; host work hidden / exposed: pipelined %.1f / %.1f "
      "ms, synchronous %.1f / %.1f ms\n",
      identical, n, static_cast<unsigned long long>(pipelined.metrics.num_steps),
      static_cast<unsigned long long>(sync.metrics.num_steps), a.host_hidden_s * 1e3,
      a.host_exposed_s * 1e3, b.host_hidden_s * 1e3, b.host_exposed_s * 1e3);
  ::testing::Test::RecordProperty("identical", identical);
}

}  // namespace vpod::engine::e2e
