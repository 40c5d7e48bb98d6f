// The engine: owns the requests, runs the step loop on its own thread and
// streams outputs. One step:
//
//   collect N -> schedule N+1 -> kv.prepare -> launch N+1 -> outputs of N
//
// collect waits for the step in flight, commits its tokens and applies the
// stop rules that need no text (stop ids, lengths); outputs of N
// (detokenization, stop strings, deltas) then run while the executor
// computes N+1 (EngineConfig::async_scheduling; off, the step is waited for
// right after its launch). A request that a stop string or an abort ends
// while N+1 runs has its N+1 token dropped, so the streams are those of the
// synchronous loop. See docs/engine.md, "Pipelining".
//
// The model, the KV cache and the detokenizer are borrowed through small
// interfaces (ModelExecutor, KvCapacity, DecoderFactory), so the whole loop
// runs on the CPU with test doubles, and in production with the real parts.
//
// Threads: submit() and abort() may be called from any thread; they hand
// work to the engine thread through a mutex-guarded inbox that the loop
// drains at each step boundary. Everything else is engine-thread only.
// Allocation: buffers are sized at construction; a step allocates nothing
// (a request allocates its own state once, at submission).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/metrics.h"
#include "engine/model_executor.h"
#include "engine/output_processor.h"
#include "engine/output_stream.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_timer.h"
#include "engine/text_decoder.h"
#include "grammar/grammar_compiler.h"
#include "kvcache/kv_capacity.h"

namespace vpod::engine {

struct EngineConfig {
  SchedulerConfig scheduler;
  // Longest prompt + output (--max-model-len). 0: as much as one KV slot holds.
  int max_model_len = 0;
  // From generation_config.json: every id that ends generation (unless ignore_eos).
  std::vector<std::int32_t> eos_token_ids;
  // Prompt token ids must be < vocab_size (0: unchecked).
  int vocab_size = 0;
  // Seeds the per-request seeds of requests that bring none.
  std::uint64_t seed = 0;
  // Structured output: compiles requests' constraints (on the submitting
  // thread) for this model's vocabulary. Null: constrained requests are refused.
  std::shared_ptr<grammar::GrammarCompiler> grammar;
  // Pipelined loop (--async-scheduling on|off): the CPU work of a step's
  // outputs overlaps the next step's forward. The streams are identical
  // either way; off waits for each step right after launching it.
  bool async_scheduling = true;
  // Every timestamp the engine takes (metrics, step times). Empty:
  // steady_clock. Tests pass a virtual clock; it is called from the engine
  // thread and from submit()'s callers.
  ClockFn clock;
};

class Engine {
 public:
  // Checks the configuration against the KV cache: one request of
  // max_model_len tokens must fit alone, so the oldest request always progresses.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config, ModelExecutor& executor,
                                                kvcache::KvCapacity& kv,
                                                const DecoderFactory& decoders);
  ~Engine();  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- any thread ---
  // Validates and queues a request; its outputs arrive on the returned stream.
  // `on_output` runs on the engine thread after each delta (see RequestStream).
  Result<std::shared_ptr<RequestStream>> submit(RequestSpec spec,
                                                std::function<void()> on_output = {});
  // Cancels a request (e.g. its client disconnected). At the next step
  // boundary its slot is freed and its stream gets a final "abort" delta.
  // Unknown or already finished ids are ignored.
  void abort(RequestId id);
  MetricsSnapshot metrics() const { return metrics_.snapshot(); }
  int max_model_len() const { return config_.max_model_len; }

  // Runs the step loop on the engine thread until stop().
  void start();
  // Stops the loop after the current step, aborts every unfinished request
  // (their streams get a final delta) and joins the thread.
  void stop();

  // --- engine thread, or the caller when the loop is not started ---
  // One step. Returns false when there was nothing to run.
  bool step();
  // Requests submitted and not yet finished (queued, waiting or running).
  bool has_work() const;
  const Scheduler& scheduler() const { return scheduler_; }

 private:
  Engine(const EngineConfig& config, ModelExecutor& executor, kvcache::KvCapacity& kv,
         const DecoderFactory& decoders);
  void run_loop();
  void take_inbox(Clock::time_point now);
  // Stream a final delta (no-op if r already ended); r is released later.
  void end_request(Request* r, FinishReason reason, std::string_view error, Clock::time_point now);
  void release(Request* r);  // frees its slot and its state
  void release_ended();      // releases the ended requests that are not in flight
  void fail_step(const ScheduledStep& step, const Status& status, Clock::time_point now);
  void update_gauges();
  // The pipeline: schedule releases ended requests and plans the next step;
  // launch marks it in flight; collect waits for it, commits, ends requests
  // by the token-only stop rules and queues the rest in pending_;
  // process_outputs runs the output work of pending_.
  const ScheduledStep& schedule(Clock::time_point now);
  Status launch(const ScheduledStep& step);
  bool collect(StepTimer& timer);
  void process_outputs();
  // After the launch: the output work of the collected step, then what the
  // new step could not do (unschedulable requests, a failed prepare/launch),
  // releases and gauges.
  void finish_step(const ScheduledStep& step, const Status& launched, Clock::time_point now);
  void record_step(const ScheduledStep& step, const StepTimes& times);

  struct PendingOutput {
    Request* request = nullptr;
    SampledToken sampled;
  };

  EngineConfig config_;
  ModelExecutor& executor_;
  kvcache::KvCapacity& kv_;
  const DecoderFactory& decoders_;
  EngineMetrics metrics_;
  Scheduler scheduler_;
  OutputProcessor outputs_;
  std::vector<SampledToken> sampled_;         // [max_num_seqs], filled by the executor
  const ScheduledStep* in_flight_ = nullptr;  // launched, not collected
  std::vector<PendingOutput> pending_;        // collected tokens awaiting output work
  Clock::time_point pending_time_;            // when they reached the host
  std::vector<Request*> ended_;               // finished/aborted, not released yet

  // Engine-thread state: every live request by id.
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<std::unique_ptr<Request>> arrived_;  // swapped with inbox_ each step
  std::vector<RequestId> aborted_;                 // swapped with inbox_aborts_ each step

  // Inbox, shared with submitting threads.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Request>> inbox_;
  std::vector<RequestId> inbox_aborts_;
  RequestId next_id_ = 1;
  std::uint64_t next_arrival_seq_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace vpod::engine
