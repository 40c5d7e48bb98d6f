#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "common/check.h"
#include "common/log.h"

namespace vpod::engine {

namespace {

// splitmix64: spreads the engine seed and a request id into a request seed.
std::uint64_t mix_seed(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// How long the idle loop sleeps between re-checks when it has work it cannot
// schedule this instant (a safety net: the scheduler always makes progress).
constexpr std::chrono::milliseconds kIdleRecheck(1);

// Bytes of output text reserved per request at submission.
constexpr std::size_t kMaxReservedTextBytes = 4096;

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config_in,
                                               ModelExecutor& executor, KvCapacity& kv,
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

Engine::Engine(const EngineConfig& config, ModelExecutor& executor, KvCapacity& kv,
               const DecoderFactory& decoders)
    : config_(config),
      executor_(executor),
      kv_(kv),
      decoders_(decoders),
      scheduler_(config.scheduler, kv),
      outputs_(metrics_),
      sampled_(config.scheduler.max_num_seqs) {}

Engine::~Engine() { stop(); }

Result<std::shared_ptr<RequestStream>> Engine::submit(RequestSpec spec,
                                                      std::function<void()> on_output) {
  VPOD_RETURN_IF_ERROR(validate(spec.sampling));
  VPOD_RETURN_IF_ERROR(validate(spec.stop));
  const int num_prompt = static_cast<int>(spec.prompt_token_ids.size());
  if (num_prompt == 0) return invalid_argument("the prompt must not be empty");
  if (num_prompt >= config_.max_model_len)
    return invalid_argument("the prompt has " + std::to_string(num_prompt) +
                            " tokens; --max-model-len " + std::to_string(config_.max_model_len) +
                            " leaves no room to generate");
  for (std::int32_t id : spec.prompt_token_ids) {
    if (id < 0 || (config_.vocab_size > 0 && id >= config_.vocab_size))
      return invalid_argument("prompt token id " + std::to_string(id) +
                              " is outside the vocabulary");
  }

  auto r = std::make_unique<Request>();
  r->sampling = spec.sampling;
  r->stop = std::move(spec.stop);
  r->num_prompt_tokens = num_prompt;
  r->max_total_tokens = static_cast<int>(
      std::min<std::int64_t>(std::int64_t{num_prompt} + r->stop.max_tokens, config_.max_model_len));
  r->token_ids = std::move(spec.prompt_token_ids);
  r->token_ids.reserve(r->max_total_tokens);
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
  r->seed = r->sampling.seed ? *r->sampling.seed : mix_seed(config_.seed ^ mix_seed(r->id));
  r->arrival_time = Clock::now();
  r->stream =
      std::make_shared<RequestStream>(r->id, r->max_total_tokens - num_prompt,
                                      r->sampling.logprobs.has_value(), std::move(on_output));
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
  for (RequestId id : aborted_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // unknown or already finished
    end_request(it->second.get(), FinishReason::abort, "", now);
  }
  aborted_.clear();
}

void Engine::end_request(Request* r, FinishReason reason, std::string_view error,
                         Clock::time_point now) {
  outputs_.end(*r, reason, error, now);
  release(r);
}

void Engine::release(Request* r) {
  scheduler_.remove(r);
  requests_.erase(r->id);  // destroys r
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

bool Engine::step() {
  const Clock::time_point t_start = Clock::now();
  take_inbox(t_start);
  const ScheduledStep& step = scheduler_.schedule(t_start);
  for (Request* r : step.unschedulable)
    end_request(r, FinishReason::error, "the KV cache cannot hold this request", t_start);
  for (Request* r : step.admitted)
    metrics_.request_queue_time_s.observe(seconds_between(r->arrival_time, t_start));
  metrics_.num_preemptions.fetch_add(step.num_preempted, std::memory_order_relaxed);
  if (step.empty()) {
    update_gauges();
    return false;
  }

  const Clock::time_point t_scheduled = Clock::now();
  Status status = kv_.prepare(step.batch);
  const Clock::time_point t_prepared = Clock::now();
  const std::span<SampledToken> sampled(sampled_.data(), step.samples.size());
  if (status.ok()) status = executor_.forward(step.batch, step.samples, sampled);
  const Clock::time_point t_forwarded = Clock::now();
  if (!status.ok()) {
    fail_step(step, status, t_forwarded);
  } else {
    scheduler_.commit(step, sampled);
    for (std::size_t i = 0; i < step.samples.size(); ++i) {
      Request* r = step.sample_requests[i];
      if (outputs_.on_token(*r, sampled[i], t_forwarded)) release(r);
    }
  }
  const Clock::time_point t_end = Clock::now();

  metrics_.add_step({.schedule_s = seconds_between(t_start, t_scheduled),
                     .prepare_s = seconds_between(t_scheduled, t_prepared),
                     .forward_s = seconds_between(t_prepared, t_forwarded),
                     .commit_s = seconds_between(t_forwarded, t_end)});
  update_gauges();
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
  // The loop is gone: this thread now owns the engine state.
  const Clock::time_point now = Clock::now();
  take_inbox(now);
  while (!requests_.empty())
    end_request(requests_.begin()->second.get(), FinishReason::abort, "", now);
  update_gauges();
}

}  // namespace vpod::engine
