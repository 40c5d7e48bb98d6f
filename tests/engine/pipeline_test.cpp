// The pipelined engine loop (EngineConfig::async_scheduling, AsyncExecutor):
// every stream is delta for delta what the synchronous loop streams, under a
// random workload with greedy and seeded sampling, stop strings, stop ids,
// min_tokens, logprobs, aborts and preemption; and the output work of a step
// really overlaps the next step's forward: in virtual time (a model and
// consumers that take known times on an injected clock, and the engine's
// hidden/exposed host-time metrics), and with real threads by order (the
// worker's next forward waits for the previous step's streaming).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/async_executor.h"
#include "engine/engine.h"
#include "engine_doubles.h"
#include "engine_rig.h"

namespace vpod::engine {
namespace {

using testing::ByteDecoderFactory;
using testing::FakeKvCache;
using testing::HashModel;
using testing::Recorder;
using testing::SlotMemory;
using testing::word_pieces;
using testing::Workload;

// A small vocabulary so that EOS, stop ids and stop strings are hit often.
constexpr int kVocab = 40;
constexpr std::int32_t kEos = 0;

struct LoopMode {
  bool async = true;
  bool worker = false;
  int spin_us = -1;  // the worker's hand-off spin (-1: AsyncExecutor's default)
};

std::string mode_name(LoopMode m) {
  return std::string(m.async ? "async" : "sync") + (m.worker ? "+worker" : "") +
         (m.worker && m.spin_us >= 0 ? "(spin " + std::to_string(m.spin_us) + " us)" : "");
}

Workload random_workload(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::string> pieces = word_pieces(kVocab);
  Workload w;
  for (int i = 0; i < n; ++i) {
    RequestSpec spec;
    const int len = 3 + static_cast<int>(rng() % 50);
    for (int k = 0; k < len; ++k)
      spec.prompt_token_ids.push_back(1 + static_cast<std::int32_t>(rng() % (kVocab - 1)));
    spec.stop.max_tokens = 1 + static_cast<int>(rng() % 40);
    if (rng() % 3 == 0) {
      spec.sampling.temperature = 0.8f;
      spec.sampling.seed = rng();
    } else {
      spec.sampling.temperature = 0.0f;
    }
    if (rng() % 3 != 0) {  // a stop string of one or two pieces (may straddle tokens)
      std::string stop = pieces[rng() % kVocab];
      if (rng() % 2 == 0) stop += pieces[rng() % kVocab];
      spec.stop.stop.push_back(stop);
      spec.stop.include_stop_str_in_output = rng() % 2 == 0;
    }
    if (rng() % 3 == 0)
      spec.stop.stop_token_ids.push_back(static_cast<std::int32_t>(rng() % kVocab));
    if (rng() % 4 == 0)
      spec.stop.min_tokens = static_cast<int>(rng() % (std::min(spec.stop.max_tokens, 5) + 1));
    if (rng() % 5 == 0) spec.stop.ignore_eos = true;
    if (rng() % 4 == 0) spec.sampling.logprobs = static_cast<int>(rng() % 3);
    w.specs.push_back(std::move(spec));
    w.submit_at_step.push_back(i < n / 2 ? 0 : static_cast<int>(rng() % 60));
    w.abort_after.push_back(rng() % 6 == 0 ? static_cast<int>(rng() % 10) : -1);
  }
  return w;
}

struct RunResult {
  std::vector<std::vector<std::string>> deltas;  // per request
  MetricsSnapshot metrics;
};

// Runs the workload through a cache that forces preemptions.
RunResult run(const Workload& w, LoopMode mode) {
  SlotMemory memory;
  FakeKvCache kv(/*num_slots=*/12, /*num_blocks=*/24, /*block_tokens=*/8,
                 /*max_tokens_per_slot=*/128, &memory);
  HashModel model(&memory, kVocab);
  std::unique_ptr<AsyncExecutor> worker;
  if (mode.worker)
    worker = std::make_unique<AsyncExecutor>(model, std::chrono::microseconds(mode.spin_us));
  ByteDecoderFactory decoders(word_pieces(kVocab));
  EngineConfig config;
  config.scheduler = {.max_num_seqs = 10, .max_num_batched_tokens = 32};
  config.eos_token_ids = {kEos};
  config.vocab_size = kVocab;
  config.max_model_len = 128;
  config.async_scheduling = mode.async;
  auto created = Engine::create(
      config, worker ? static_cast<ModelExecutor&>(*worker) : static_cast<ModelExecutor&>(model),
      kv, decoders);
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  Engine& engine = **created;
  std::vector<std::unique_ptr<Recorder>> rec = testing::drive(engine, w);
  EXPECT_EQ(kv.slots_in_use(), 0);
  RunResult result;
  result.metrics = engine.metrics();
  for (auto& r : rec) {
    EXPECT_TRUE(r && r->finished);
    result.deltas.push_back(r ? r->deltas : std::vector<std::string>{});
  }
  return result;
}

TEST(Pipeline, EveryStreamEqualsTheSynchronousLoopDeltaForDelta) {
  const Workload w = random_workload(240, 77);
  const RunResult sync = run(w, {.async = false});
  // The workload exercises what the pipeline must get right.
  EXPECT_GT(sync.metrics.num_preemptions, 10u);
  const auto& fin = sync.metrics.requests_finished;
  EXPECT_GT(fin[static_cast<int>(FinishReason::stop)], 30u);
  EXPECT_GT(fin[static_cast<int>(FinishReason::length)], 30u);
  EXPECT_GT(fin[static_cast<int>(FinishReason::abort)], 10u);
  int stop_strings = 0;
  for (const auto& d : sync.deltas)
    if (!d.empty() && d.back().find("stop=''") == std::string::npos) ++stop_strings;
  EXPECT_GT(stop_strings, 20) << "requests ended by a stop string";

  for (const LoopMode mode :
       {LoopMode{.async = true}, LoopMode{.async = true, .worker = true, .spin_us = 0},
        LoopMode{.async = true, .worker = true, .spin_us = 20},
        LoopMode{.async = false, .worker = true}}) {
    SCOPED_TRACE(mode_name(mode));
    const RunResult got = run(w, mode);
    ASSERT_EQ(got.deltas.size(), sync.deltas.size());
    int mismatches = 0;
    for (std::size_t i = 0; i < got.deltas.size() && mismatches < 5; ++i) {
      if (got.deltas[i] == sync.deltas[i]) continue;
      ++mismatches;
      ADD_FAILURE() << "request " << i << " streams differently";
      for (std::size_t k = 0; k < std::max(got.deltas[i].size(), sync.deltas[i].size()); ++k) {
        std::printf("  %zu sync: %s\n       %s: %s\n", k,
                    k < sync.deltas[i].size() ? sync.deltas[i][k].c_str() : "-",
                    mode_name(mode).c_str(),
                    k < got.deltas[i].size() ? got.deltas[i][k].c_str() : "-");
      }
    }
    EXPECT_EQ(got.metrics.generation_tokens, sync.metrics.generation_tokens);
    EXPECT_EQ(got.metrics.requests_finished, sync.metrics.requests_finished);
    if (mode.async) {
      EXPECT_GT(got.metrics.step_time_total.host_hidden_s, 0.0);
    } else {
      EXPECT_EQ(got.metrics.step_time_total.host_hidden_s, 0.0);
    }
  }
}

// Virtual time: only the test's doubles move this clock (the engine's own
// host work takes none), so the step times below are exact, whatever the
// load on the machine. Read from the engine thread and the submitting one.
class VirtualClock {
 public:
  Clock::time_point now() const { return Clock::time_point(Clock::duration(ticks_.load())); }
  void advance(Clock::duration d) { ticks_ += d.count(); }
  void advance_to(Clock::time_point t) {
    Clock::rep ticks = ticks_.load();
    while (ticks < t.time_since_epoch().count() &&
           !ticks_.compare_exchange_weak(ticks, t.time_since_epoch().count())) {
    }
  }
  ClockFn fn() {
    return [this] { return now(); };
  }

 private:
  std::atomic<Clock::rep> ticks_{0};
};

// A model that takes `forward_time` of virtual time per step: launch() notes
// when the step will be done, wait() moves the clock there (it does not move
// if the engine's output work already took that long: that is the overlap).
// It wraps whatever computes the tokens - the model double, or the
// AsyncExecutor worker running it on its thread.
class TimedExecutor final : public ModelExecutor {
 public:
  TimedExecutor(ModelExecutor& inner, VirtualClock& clock, Clock::duration forward_time)
      : inner_(inner), clock_(clock), forward_time_(forward_time) {}
  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out, const PromptScores& scores) override {
    clock_.advance(forward_time_);
    return inner_.forward(batch, samples, out, scores);
  }
  Status launch(const HybridBatch& batch, std::span<const SampleSpec> samples,
                std::span<SampledToken> out, const PromptScores& scores) override {
    done_at_ = clock_.now() + forward_time_;
    return inner_.launch(batch, samples, out, scores);
  }
  Status wait() override {
    const Status status = inner_.wait();
    clock_.advance_to(done_at_);
    return status;
  }

 private:
  ModelExecutor& inner_;
  VirtualClock& clock_;
  Clock::duration forward_time_;
  Clock::time_point done_at_;
};

struct OverlapResult {
  double wall_s = 0.0;
  StepTimes times;
  std::uint64_t steps = 0;
};

// A model taking 3 ms per step and consumers taking 3 ms of output work per
// step (in the streams' callbacks, i.e. in the engine's output work), in
// virtual time: pipelined, a step costs max(forward, output) instead of
// their sum, and the engine reports the output work as hidden.
OverlapResult run_overlap(LoopMode mode, int num_requests, int num_tokens) {
  using std::chrono::microseconds;
  SlotMemory memory;
  FakeKvCache kv(16, 256, 16, 1024, &memory);
  HashModel hash(&memory, kVocab);
  VirtualClock clock;
  std::unique_ptr<AsyncExecutor> worker;
  if (mode.worker) worker = std::make_unique<AsyncExecutor>(hash);
  TimedExecutor model(worker ? static_cast<ModelExecutor&>(*worker) : hash, clock,
                      microseconds(3000));
  ByteDecoderFactory decoders(word_pieces(kVocab));
  EngineConfig config;
  config.scheduler = {.max_num_seqs = 16, .max_num_batched_tokens = 64};
  config.vocab_size = kVocab;
  config.async_scheduling = mode.async;
  config.clock = clock.fn();
  auto engine = std::move(Engine::create(config, model, kv, decoders)).value();
  std::vector<std::shared_ptr<RequestStream>> streams;
  const microseconds per_output(3000 / num_requests);  // 3 ms of output work per step
  for (int i = 0; i < num_requests; ++i) {
    RequestSpec spec;
    spec.prompt_token_ids = {1 + i, 2, 3};
    spec.sampling.temperature = 0.0f;
    spec.stop.max_tokens = num_tokens;
    spec.stop.ignore_eos = true;
    streams.push_back(*engine->submit(spec, [&clock, per_output] { clock.advance(per_output); }));
  }
  const Clock::time_point t0 = clock.now();
  while (engine->has_work()) engine->step();
  OverlapResult r;
  r.wall_s = std::chrono::duration<double>(clock.now() - t0).count();
  const MetricsSnapshot m = engine->metrics();
  r.times = m.step_time_total;
  r.steps = m.num_steps;
  std::printf(
      "%-12s %3llu steps  %6.1f ms  per step: %.2f ms; host work hidden %.1f ms, exposed %.1f "
      "ms; launch %.1f ms, wait %.1f ms (virtual time)\n",
      mode_name(mode).c_str(), static_cast<unsigned long long>(r.steps), r.wall_s * 1e3,
      r.wall_s * 1e3 / static_cast<double>(r.steps), r.times.host_hidden_s * 1e3,
      r.times.host_exposed_s * 1e3, r.times.launch_s * 1e3, r.times.wait_s * 1e3);
  return r;
}

TEST(Pipeline, OutputWorkOverlapsTheNextForward) {
  const int kRequests = 8, kTokens = 24;
  const OverlapResult sync = run_overlap({.async = false}, kRequests, kTokens);
  const OverlapResult pipelined = run_overlap({.async = true, .worker = true}, kRequests, kTokens);
  ASSERT_EQ(sync.steps, pipelined.steps);
  // Synchronous: the output work is all exposed, nothing hidden.
  EXPECT_EQ(sync.times.host_hidden_s, 0.0);
  EXPECT_GT(sync.times.host_exposed_s, 0.8 * 3e-3 * static_cast<double>(sync.steps - 2));
  // Pipelined: the output work of all but the first and last steps runs
  // while the next forward does, so it is hidden, and the step takes
  // max(3 ms, 3 ms) instead of their 6 ms sum.
  EXPECT_GT(pipelined.times.host_hidden_s, 0.8 * 3e-3 * static_cast<double>(pipelined.steps - 2));
  EXPECT_LT(pipelined.times.host_exposed_s, 0.5 * pipelined.times.host_hidden_s);
  EXPECT_LT(pipelined.wall_s, 0.8 * sync.wall_s);
}

// Real threads, no clock: the worker's forward of step k blocks until the
// engine thread has streamed the tokens of step k-1. That completes only if
// launch() returns before the forward is done and the output work of the
// previous step runs meanwhile (a synchronous executor would wait out the
// timeout on the engine thread itself).
class WaitsForOutputWork final : public ModelExecutor {
 public:
  explicit WaitsForOutputWork(ModelExecutor& inner) : inner_(inner) {}
  Status forward(const HybridBatch& batch, std::span<const SampleSpec> samples,
                 std::span<SampledToken> out, const PromptScores& scores) override {
    const int step = ++num_forwards_;
    if (step >= 2) {
      std::unique_lock lock(mutex_);
      const bool streamed =
          cv_.wait_for(lock, std::chrono::seconds(10), [&] { return num_streamed_ >= step - 1; });
      if (!streamed) ++num_timeouts;
    }
    return inner_.forward(batch, samples, out, scores);
  }
  void streamed() {  // one step's tokens (one request) reached its stream
    {
      std::lock_guard lock(mutex_);
      ++num_streamed_;
    }
    cv_.notify_all();
  }
  std::atomic<int> num_timeouts{0};

 private:
  ModelExecutor& inner_;
  std::atomic<int> num_forwards_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  int num_streamed_ = 0;
};

TEST(Pipeline, TheWorkerRunsTheNextForwardDuringTheOutputWork) {
  SlotMemory memory;
  FakeKvCache kv(4, 64, 16, 256, &memory);
  HashModel hash(&memory, kVocab);
  WaitsForOutputWork model(hash);
  AsyncExecutor worker(model);
  ByteDecoderFactory decoders(word_pieces(kVocab));
  EngineConfig config;
  config.scheduler = {.max_num_seqs = 4, .max_num_batched_tokens = 64};
  config.vocab_size = kVocab;
  config.async_scheduling = true;
  auto engine = std::move(Engine::create(config, worker, kv, decoders)).value();
  RequestSpec spec;
  spec.prompt_token_ids = {1, 2, 3};
  spec.sampling.temperature = 0.0f;
  spec.stop.max_tokens = 8;
  spec.stop.ignore_eos = true;
  auto stream = *engine->submit(spec, [&model] { model.streamed(); });
  while (engine->has_work()) engine->step();
  EXPECT_EQ(model.num_timeouts.load(), 0);
  RequestOutput out;
  ASSERT_TRUE(stream->try_pop(out));
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.num_generated_tokens, 8);
}

// The worker thread hands back errors and survives them.
class FailingModel final : public ModelExecutor {
 public:
  Status forward(const HybridBatch&, std::span<const SampleSpec>, std::span<SampledToken> out,
                 const PromptScores&) override {
    ++calls;
    if (calls % 2 == 0) return internal_error("injected");
    for (SampledToken& s : out) s = SampledToken{.token = 7};
    return {};
  }
  int calls = 0;
};

// Both hand-offs: sleeping on the condition variable, and spinning (the
// default on machines with >= 8 hardware threads).
class AsyncExecutorTest : public ::testing::TestWithParam<int> {};

TEST_P(AsyncExecutorTest, ReturnsEachStepsResultFromWait) {
  FailingModel inner;
  AsyncExecutor worker(inner, std::chrono::microseconds(GetParam()));
  HybridBatch batch;
  std::vector<SampleSpec> samples(3);
  std::vector<SampledToken> out(3);
  for (int i = 1; i <= 6; ++i) {
    ASSERT_TRUE(worker.launch(batch, samples, out, {}).ok());
    const Status s = worker.wait();
    EXPECT_EQ(s.ok(), i % 2 == 1) << i;
    if (s.ok()) {
      EXPECT_EQ(out[2].token, 7);
    }
    out.assign(3, SampledToken{});
  }
  EXPECT_TRUE(worker.wait().ok());  // nothing launched
  EXPECT_TRUE(worker.forward(batch, samples, out, {}).ok());
  EXPECT_EQ(inner.calls, 7);
  ASSERT_TRUE(worker.launch(batch, samples, out, {}).ok());  // destroyed with a step in flight
}

INSTANTIATE_TEST_SUITE_P(Spin, AsyncExecutorTest, ::testing::Values(0, 50, 5000));

}  // namespace
}  // namespace vpod::engine
