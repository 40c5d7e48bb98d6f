// The engine over the test doubles (engine_doubles.h) as production wires
// it, a recorder of what a client sees, and the driver of a scripted
// workload (arrivals, client disconnects): shared by the engine tests that
// drive whole workloads (pipeline, prefix caching, prompt logprobs).
#pragma once

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/async_executor.h"
#include "engine/engine.h"
#include "engine_doubles.h"

namespace vpod::engine::testing {

inline constexpr int kVocab = 60;
inline constexpr std::int32_t kEos = 0;
inline constexpr int kBlock = 8;

struct Mode {
  bool caching = true;
  bool async = true;
  bool worker = false;
};

inline std::string mode_name(Mode m) {
  return std::string(m.caching ? "caching" : "no caching") + (m.async ? ", async" : ", sync") +
         (m.worker ? "+worker" : "");
}

// One delta as a line: what a client sees (top logprobs and prompt logprobs
// included), except the cached-token count (the one field that differs with
// caching on).
inline std::string describe(const RequestOutput& d) {
  std::ostringstream o;
  o << "tokens=";
  for (std::int32_t t : d.token_ids) o << t << ',';
  o << " text='" << d.text << "' logprobs=";
  for (const SampledToken& s : d.logprobs) {
    o << s.token << ':' << s.logprob << '[';
    for (int k = 0; k < s.num_top; ++k) o << s.top[k].token << ':' << s.top[k].logprob << ' ';
    o << ']';
  }
  o << " prompt_logprobs=";
  for (const SampledToken& s : d.prompt_logprobs) {
    o << s.token << ':' << s.logprob << '#' << s.rank << '[';
    for (int k = 0; k < s.num_top; ++k) o << s.top[k].token << ':' << s.top[k].logprob << ' ';
    o << ']';
  }
  o << " finished=" << d.finished << " reason=" << finish_reason_name(d.finish_reason) << " stop='"
    << d.stop_string << "' stop_token=" << (d.stop_token ? *d.stop_token : -1) << " error='"
    << d.error << "' n=" << d.num_prompt_tokens << '/' << d.num_generated_tokens;
  return o.str();
}

struct Recorder {
  std::shared_ptr<RequestStream> stream;
  std::vector<std::string> deltas;
  int num_tokens = 0;
  bool finished = false;
  int cached_tokens = -1;  // of the final delta
  RequestOutput out;
  void on_output() {
    while (stream && stream->try_pop(out)) {
      deltas.push_back(describe(out));
      num_tokens += static_cast<int>(out.token_ids.size());
      if (out.finished) cached_tokens = out.num_cached_tokens;
      finished = finished || out.finished;
    }
  }
};

// A scripted workload: each request, when it arrives and when its client
// hangs up.
struct Workload {
  std::vector<RequestSpec> specs;
  std::vector<int> submit_at_step;  // the step() call before which it is submitted
  std::vector<int> abort_after;     // the client aborts once it saw this many tokens; -1 never
};

// Runs `w` through `engine` one step() at a time until every request has
// arrived and nothing is left to do; `after_step` runs after each step
// (invariant checks). Stops early once the test has failed.
inline std::vector<std::unique_ptr<Recorder>> drive(Engine& engine, const Workload& w,
                                                    const std::function<void()>& after_step = {}) {
  const std::size_t n = w.specs.size();
  std::vector<std::unique_ptr<Recorder>> rec(n);
  std::vector<bool> aborted(n, false);
  std::size_t submitted = 0;
  for (int step = 0; step < 100000; ++step) {
    for (std::size_t i = 0; i < n; ++i) {
      if (rec[i] || w.submit_at_step[i] > step) continue;
      rec[i] = std::make_unique<Recorder>();
      Recorder* r = rec[i].get();
      auto stream = engine.submit(w.specs[i], [r] { r->on_output(); });
      EXPECT_TRUE(stream.ok()) << stream.status().to_string();
      r->stream = *stream;
      ++submitted;
    }
    // A client that saw enough tokens disconnects before the next step.
    for (std::size_t i = 0; i < n; ++i) {
      if (!rec[i] || aborted[i] || rec[i]->finished || w.abort_after[i] < 0) continue;
      if (rec[i]->num_tokens >= w.abort_after[i]) {
        engine.abort(rec[i]->stream->id());
        aborted[i] = true;
      }
    }
    if (submitted == n && !engine.has_work()) break;
    engine.step();
    if (after_step) after_step();
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_FALSE(engine.has_work());
  return rec;
}

// The engine over the doubles, as production wires it.
struct Rig {
  Rig(Mode mode, int num_slots, int num_blocks, int max_seqs, int budget, int max_len)
      : kv(num_slots, num_blocks, kBlock, max_len, &memory, mode.caching),
        model(&memory, kVocab),
        decoders(word_pieces(kVocab)) {
    if (mode.worker) worker = std::make_unique<AsyncExecutor>(model);
    EngineConfig config;
    config.async_scheduling = mode.async;
    config.scheduler = {.max_num_seqs = max_seqs, .max_num_batched_tokens = budget};
    config.eos_token_ids = {kEos};
    config.vocab_size = kVocab;
    config.max_model_len = max_len;
    auto created = Engine::create(
        config, worker ? static_cast<ModelExecutor&>(*worker) : static_cast<ModelExecutor&>(model),
        kv, decoders);
    EXPECT_TRUE(created.ok()) << created.status().to_string();
    engine = std::move(created).value();
  }

  SlotMemory memory;
  FakeKvCache kv;
  HashModel model;
  std::unique_ptr<AsyncExecutor> worker;  // before the engine: destroyed after it
  ByteDecoderFactory decoders;
  std::unique_ptr<Engine> engine;
};

}  // namespace vpod::engine::testing
