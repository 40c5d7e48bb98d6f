// The engine (engine.h): request intake, the step loop on its own thread
// (collect, schedule, KV prepare, launch, output work), aborts and shutdown.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/splitmix64.h"
#include "grammar/grammar_state.h"

namespace vpod::engine {

namespace {

// How long the idle loop sleeps between re-checks when it has work it cannot
// schedule this instant (a safety net: the scheduler always makes progress).
constexpr std::chrono::milliseconds kIdleRecheck(1);

// Bytes of output text reserved per request at submission.
constexpr std::size_t kMaxReservedTextBytes = 4096;

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config_in,
                                               ModelExecutor& executor, kvcache::KvCapacity& kv,
                                               const DecoderFactory& decoders) {
  EngineConfig config = config_in;
  VPOD_RETURN_IF_ERROR(validate(config.scheduler));
  const std::int64_t capacity = kv.capacity_tokens();
  const int slot_tokens = kv.max_tokens_per_slot();
  const int fits_alone = static_cast<int>(std::min<std::int64_t>(capacity, slot_tokens));
  if (config.max_model_len == 0) config.max_model_len = fits_alone;
  if (config.max_model_len < 2)
    return invalid_argument("--max-model-len must be >= 2, got " +
                            std::to_string(config.max_model_len));
  if (config.max_model_len > fits_alone)
    return invalid_argument("--max-model-len " + std::to_string(config.max_model_len) +
                            " does not fit in the KV cache (one slot holds " +
                            std::to_string(slot_tokens) + " tokens, the cache " +
                            std::to_string(capacity) +
                            "); lower --max-model-len or give the KV cache more memory");
  return std::unique_ptr<Engine>(new Engine(config, executor, kv, decoders));
}

Engine::Engine(const EngineConfig& config, ModelExecutor& executor, kvcache::KvCapacity& kv,
               const DecoderFactory& decoders)
    : config_(config),
      executor_(executor),
      kv_(kv),
      decoders_(decoders),
      metrics_(config.max_model_len),
      scheduler_(config.scheduler, kv),
      outputs_(metrics_),
      sampled_(config.scheduler.max_num_seqs),
      scored_(config.scheduler.max_num_batched_tokens) {
  if (!config_.clock) config_.clock = [] { return Clock::now(); };
  pending_.reserve(config.scheduler.max_num_seqs);
  // Ends per step: every running request plus a few aborts of waiting ones
  // (more only in a burst of aborts).
  ended_.reserve(2 * static_cast<std::size_t>(config.scheduler.max_num_seqs));
}

Engine::~Engine() { stop(); }

Result<std::shared_ptr<RequestStream>> Engine::submit(RequestSpec spec,
                                                      std::function<void()> on_output) {
  VPOD_RETURN_IF_ERROR(validate(spec.sampling));
  VPOD_RETURN_IF_ERROR(validate(spec.stop));
  const int num_prompt = static_cast<int>(spec.prompt_token_ids.size());
  if (num_prompt == 0) return invalid_argument("the prompt must not be empty");
  if (spec.stop.max_tokens == 0 && !spec.sampling.prompt_logprobs)
    return invalid_argument(
        "max_tokens must be >= 1, got 0 (0 only scores a prompt: with prompt logprobs)");
  if (num_prompt >= config_.max_model_len)
    return invalid_argument("the prompt has " + std::to_string(num_prompt) +
                            " tokens; --max-model-len " + std::to_string(config_.max_model_len) +
                            " leaves no room to generate");
  for (std::int32_t id : spec.prompt_token_ids) {
    if (id < 0 || (config_.vocab_size > 0 && id >= config_.vocab_size))
      return invalid_argument("prompt token id " + std::to_string(id) +
                              " is outside the vocabulary");
  }
  for (const kernels::LogitBias& b : spec.sampling.logit_bias) {
    if (config_.vocab_size > 0 && b.token >= config_.vocab_size)
      return invalid_argument("logit_bias token id " + std::to_string(b.token) +
                              " is outside the vocabulary");
  }

  auto r = std::make_unique<Request>();
  if (spec.constraint.active()) {
    // Compiled here, on the client's thread (a cache hit for a repeated
    // schema); a spec that cannot be compiled is the client's error.
    if (!config_.grammar)
      return failed_precondition(
          "structured output needs the model's tokenizer, which is not loaded");
    VPOD_ASSIGN_OR_RETURN(std::unique_ptr<grammar::Matcher> matcher,
                          config_.grammar->make_matcher(spec.constraint));
    r->grammar = std::make_shared<grammar::GrammarState>(std::move(matcher));
  }
  r->sampling = spec.sampling;
  r->stop = std::move(spec.stop);
  r->num_prompt_tokens = num_prompt;
  r->cache_salt = hash_cache_salt(spec.cache_salt);
  r->max_total_tokens = static_cast<int>(
      std::min<std::int64_t>(std::int64_t{num_prompt} + r->stop.max_tokens, config_.max_model_len));
  r->token_ids = std::move(spec.prompt_token_ids);
  r->token_ids.reserve(r->max_total_tokens);
  if (r->sampling.prompt_logprobs) r->prompt_logprobs.reserve(num_prompt - 1);
  if (!r->stop.ignore_eos) r->stop_ids = config_.eos_token_ids;
  for (std::int32_t id : r->stop.stop_token_ids)
    if (std::find(r->stop_ids.begin(), r->stop_ids.end(), id) == r->stop_ids.end())
      r->stop_ids.push_back(id);
  r->stop_strings = StopStringMatcher(r->stop.stop);
  r->decoder =
      decoders_.create(std::span(r->token_ids.data(), num_prompt), r->stop.skip_special_tokens);
  // Text grows geometrically past this; most outputs never reach it.
  r->text.reserve(std::min<std::size_t>(kMaxReservedTextBytes,
                                        std::size_t{8} * (r->max_total_tokens - num_prompt)));

  std::lock_guard lock(mutex_);
  if (stopping_) return unavailable("the engine is shutting down");
  r->id = next_id_++;
  r->arrival_seq = next_arrival_seq_++;
  r->seed = r->sampling.seed ? *r->sampling.seed : splitmix64(config_.seed ^ splitmix64(r->id));
  r->arrival_time = config_.clock();
  r->stream = std::make_shared<RequestStream>(
      r->id, r->max_total_tokens - num_prompt, r->sampling.logprobs.has_value(),
      r->sampling.prompt_logprobs ? num_prompt - 1 : 0, std::move(on_output));
  std::shared_ptr<RequestStream> stream = r->stream;
  inbox_.push_back(std::move(r));
  wake_.notify_one();
  return stream;
}

void Engine::abort(RequestId id) {
  std::lock_guard lock(mutex_);
  inbox_aborts_.push_back(id);
  wake_.notify_one();
}

bool Engine::has_work() const {
  std::lock_guard lock(mutex_);
  return !requests_.empty() || !inbox_.empty();
}

void Engine::take_inbox(Clock::time_point now) {
  {
    std::lock_guard lock(mutex_);
    std::swap(arrived_, inbox_);
    std::swap(aborted_, inbox_aborts_);
  }
  for (std::unique_ptr<Request>& r : arrived_) {
    scheduler_.add(r.get());
    const RequestId id = r->id;
    requests_.emplace(id, std::move(r));
  }
  arrived_.clear();
  // A token of an aborted request still in flight is dropped at its collect:
  // the stream ends where a synchronous loop would have ended it.
  for (RequestId id : aborted_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;                          // unknown or already released
    end_request(it->second.get(), FinishReason::abort, "", now);  // no-op if already ended
  }
  aborted_.clear();
}

void Engine::end_request(Request* r, FinishReason reason, std::string_view error,
                         Clock::time_point now) {
  if (r->is_done()) return;
  outputs_.end(*r, reason, error, now);
  ended_.push_back(r);
}

void Engine::release(Request* r) {
  scheduler_.remove(r);
  requests_.erase(r->id);  // destroys r
}

// Only between steps: the step in flight may use an ended request's slot and
// token ids, and the executor may read the KV cache's tables meanwhile.
void Engine::release_ended() {
  if (in_flight_ != nullptr) return;
  for (Request* r : ended_) release(r);
  ended_.clear();
}

void Engine::fail_step(const ScheduledStep& step, const Status& status, Clock::time_point now) {
  VPOD_LOG_ERROR("engine step failed, failing its {} requests: {}",
                 step.prefill_requests.size() + step.decode_requests.size(), status.to_string());
  for (Request* r : step.prefill_requests)
    end_request(r, FinishReason::error, status.message(), now);
  for (Request* r : step.decode_requests)
    end_request(r, FinishReason::error, status.message(), now);
}

void Engine::update_gauges() {
  metrics_.num_requests_running.store(static_cast<std::int64_t>(scheduler_.num_running()),
                                      std::memory_order_relaxed);
  metrics_.num_requests_waiting.store(static_cast<std::int64_t>(scheduler_.num_waiting()),
                                      std::memory_order_relaxed);
  metrics_.kv_cache_usage_ratio.store(kv_.usage(), std::memory_order_relaxed);
}

Status Engine::launch(const ScheduledStep& step) {
  VPOD_CHECK(step.num_scored_rows <= static_cast<int>(scored_.size()));
  const PromptScores scores{
      step.scores, std::span(scored_.data(), static_cast<std::size_t>(step.num_scored_rows))};
  VPOD_RETURN_IF_ERROR(executor_.launch(step.batch, step.samples,
                                        std::span(sampled_.data(), step.samples.size()), scores));
  in_flight_ = &step;
  return {};
}

bool Engine::collect(StepTimer& timer) {
  if (in_flight_ == nullptr) return false;
  const ScheduledStep& step = *std::exchange(in_flight_, nullptr);
  timer.begin(StepPhase::wait);
  const Status status = executor_.wait();
  const Clock::time_point now = timer.begin(StepPhase::commit);  // nothing in flight now
  if (!status.ok()) {
    fail_step(step, status, now);
  } else {
    const std::span<const SampledToken> sampled(sampled_.data(), step.samples.size());
    scheduler_.commit(step, sampled);  // skips requests that ended meanwhile
    collect_prompt_scores(step, now);
    pending_time_ = now;
    for (std::size_t i = 0; i < sampled.size(); ++i) {
      Request* r = step.sample_requests[i];
      if (r->is_done()) continue;  // ended meanwhile (stop string, abort): token dropped
      if (sampled[i].deferred) {   // its grammar's mask was late: it decodes again next step
        metrics_.grammar_deferred_samples.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (sampled[i].grammar_rejected) {
        end_request(r, FinishReason::error,
                    "internal error: a sampled token breaks the request's grammar", now);
        continue;
      }
      if (OutputProcessor::stops_by_token(*r)) {
        // Ends now, so the next schedule sees its slot free (as without pipelining).
        const bool finished = outputs_.on_token(*r, sampled[i], now);
        VPOD_CHECK(finished);
        ended_.push_back(r);
      } else {
        pending_.push_back({r, sampled[i]});
      }
    }
  }
  timer.end();
  return true;
}

// The step's prompt logprobs join their requests; a max_tokens 0 request
// whose prompt is now computed ends with them (it samples nothing).
void Engine::collect_prompt_scores(const ScheduledStep& step, Clock::time_point now) {
  std::size_t next = 0;
  for (std::size_t i = 0; i < step.scores.size(); ++i) {
    Request* r = step.score_requests[i];
    const auto n = static_cast<std::size_t>(step.scores[i].num_rows);
    if (!r->is_done()) {
      VPOD_CHECK(r->prompt_logprobs.size() + n <= r->prompt_logprobs.capacity());
      r->prompt_logprobs.insert(r->prompt_logprobs.end(), scored_.begin() + next,
                                scored_.begin() + next + n);
    }
    next += n;
  }
  for (Request* r : step.prefill_requests) {
    if (r->score_only() && !r->is_done() && r->num_uncomputed() == 0) {
      outputs_.on_prompt_scored(*r, now);
      ended_.push_back(r);
    }
  }
}

void Engine::process_outputs() {
  for (const PendingOutput& p : pending_) {
    VPOD_CHECK(!p.request->is_done());  // nothing ends a request between collect and here
    if (outputs_.on_token(*p.request, p.sampled, pending_time_)) ended_.push_back(p.request);
  }
  pending_.clear();
}

const ScheduledStep& Engine::schedule(Clock::time_point now) {
  release_ended();  // nothing is in flight: every ended request's slot is free
  const ScheduledStep& step = scheduler_.schedule(now);
  for (Request* r : step.admitted)
    metrics_.request_queue_time_s.observe(seconds_between(r->arrival_time, now));
  metrics_.num_preemptions.fetch_add(step.num_preempted, std::memory_order_relaxed);
  metrics_.prefix_cache_queries.fetch_add(step.prefix_cache_queries, std::memory_order_relaxed);
  metrics_.prefix_cache_hits.fetch_add(step.prefix_cache_hits, std::memory_order_relaxed);
  return step;
}

void Engine::finish_step(const ScheduledStep& step, const Status& launched, Clock::time_point now) {
  process_outputs();  // detokenize, stop strings, stream: overlaps the step in flight
  for (Request* r : step.unschedulable)
    end_request(r, FinishReason::error, "the KV cache cannot hold this request", now);
  if (!launched.ok()) fail_step(step, launched, now);
  release_ended();  // unless a step is in flight
  update_gauges();
}

void Engine::record_step(const ScheduledStep& step, const StepTimes& times) {
  metrics_.add_step(times, !step.empty());
  if (!step.empty()) {
    metrics_.count_step_kind(step.batch.prefills.size(), step.batch.decodes.size());
    metrics_.iteration_tokens.observe(step.batch.num_tokens());
  }
}

// Step N+1 of the pipeline (docs/engine.md, "The step"); the timer books each
// phase (StepPhase) into the step's StepTimes.
bool Engine::step() {
  StepTimer timer(config_.clock);
  take_inbox(timer.now());                // new requests; aborts end their streams now
  const bool collected = collect(timer);  // pipelined: wait for step N, commit it
  const ScheduledStep& step = schedule(timer.begin(StepPhase::schedule));  // step N+1
  timer.begin(StepPhase::prepare);
  Status launched = step.empty() ? Status{} : kv_.prepare(step.batch);  // back its tokens
  timer.begin(StepPhase::launch);
  if (launched.ok() && !step.empty()) launched = launch(step);  // returns at once when pipelined
  // Queued: the prompt blocks the step computes may be shared from now on
  // (later readers of the cache run after it).
  if (launched.ok()) scheduler_.cache_prompts(step);
  timer.end();
  if (!config_.async_scheduling) collect(timer);  // synchronous: wait for it right here
  const Clock::time_point t_outputs =
      timer.begin(in_flight_ != nullptr ? StepPhase::hidden_outputs : StepPhase::exposed_outputs);
  finish_step(step, launched, t_outputs);  // output work of step N while N+1 computes
  timer.end();
  if (!collected && step.empty()) return false;
  record_step(step, timer.times());
  return true;
}

void Engine::start() {
  std::lock_guard lock(mutex_);
  VPOD_CHECK_MSG(!thread_.joinable(), "Engine::start called twice");
  thread_ = std::thread([this] { run_loop(); });
}

void Engine::run_loop() {
  bool ran = false;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      auto ready = [&] {
        return stopping_ || !inbox_.empty() || !inbox_aborts_.empty() || !requests_.empty();
      };
      // A step that ran nothing while requests exist (cannot happen with a
      // consistent config, see Scheduler) re-checks after a short sleep
      // instead of spinning.
      if (!ran && !requests_.empty())
        wake_.wait_for(lock, kIdleRecheck, [&] { return stopping_; });
      else
        wake_.wait(lock, ready);
      if (stopping_) break;
    }
    ran = step();
  }
}

void Engine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  // The loop is gone: this thread now owns the engine state. A step still in
  // flight completes and streams its tokens first.
  const Clock::time_point now = config_.clock();
  take_inbox(now);
  StepTimer unused(config_.clock);
  collect(unused);
  process_outputs();
  for (auto& [id, r] : requests_) end_request(r.get(), FinishReason::abort, "", now);
  release_ended();
  update_gauges();
}

}  // namespace vpod::engine
