// The vAttention cache's mapper thread: background growth and pre-mapping.
#include "kvcache/kv_mapper.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "common/log.h"

namespace vpod::kvcache {
KvMapper::KvMapper(KvMemory& memory, std::int64_t lookahead_tokens)
    : memory_(memory), lookahead_tokens_(lookahead_tokens) {
  const int max_slots = memory.geometry().max_slots;
  want_required_.assign(max_slots, 0);
  want_desired_.assign(max_slots, 0);
  want_generation_.assign(max_slots, 0);
  is_dirty_.assign(max_slots, 0);
  dirty_slots_.reserve(max_slots);
  work_.reserve(max_slots);
  results_.resize(kTicketHistory);
}

Status KvMapper::start() {
  thread_ = std::thread(&KvMapper::run, this);
  std::unique_lock lock(queue_mutex_);
  done_cv_.wait(lock, [&] { return ready_; });
  if (!start_status_.ok()) {
    const Status why = start_status_;
    lock.unlock();
    thread_.join();
    return why.with_context("starting the KV mapper thread");
  }
  return {};
}

KvMapper::~KvMapper() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(queue_mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

PrepareTicket KvMapper::post(std::span<const SlotTokens> next, bool required) {
  const PageGeometry& g = memory_.geometry();
  PrepareTicket ticket = 0;
  {
    std::lock_guard lock(queue_mutex_);
    // Order: the queue mutex before the state mutex.
    memory_.with_state([&](const SlotLedger& ledger, KvStats&) {
      for (const SlotTokens& entry : next) {
        const int s = entry.slot;
        const std::uint64_t generation = ledger.slot(s).generation;
        if (want_generation_[s] != generation) {
          // The slot changed owners since these wants were posted: drop them.
          want_required_[s] = 0;
          want_desired_[s] = 0;
          want_generation_[s] = generation;
        }
        if (required) {
          want_required_[s] = std::max(want_required_[s], g.pages_for_tokens(entry.tokens));
        }
        const std::int64_t desired = desired_tokens(entry, lookahead_tokens_, g.max_ctx, true);
        want_desired_[s] = std::max(want_desired_[s], g.pages_for_tokens(desired));
        if (!is_dirty_[s]) {
          is_dirty_[s] = 1;
          dirty_slots_.push_back(s);
        }
      }
    });
    const std::uint64_t posted = posted_.load(std::memory_order_relaxed) + 1;
    posted_.store(posted, std::memory_order_release);
    if (required) ticket = posted;
  }
  work_cv_.notify_one();
  return ticket;
}

void KvMapper::prewarm_once(std::unique_lock<std::mutex>& queue_lock) {
  // Nothing a step needs: one chunk of pre-mapping for the next acquire(),
  // then look again (posted growth and settle_prewarm() wait at most one chunk).
  const std::int64_t expected = prewarm_expected_;
  const std::int64_t tokens = prewarm_tokens_;
  const std::uint64_t seq = prewarm_seq_;
  prewarm_busy_ = true;
  queue_lock.unlock();
  const Clock::time_point start = Clock::now();
  bool more = false;
  {
    const KvMemory::MapLock map_lock = memory_.lock_mapping();
    more = memory_.prewarm_chunk(map_lock, expected, tokens);
  }
  const double busy = seconds_since(start);
  memory_.with_state([&](SlotLedger&, KvStats& counters) { counters.mapper_busy_seconds += busy; });
  queue_lock.lock();
  prewarm_busy_ = false;
  if (!more && prewarm_seq_ == seq) prewarm_tokens_ = 0;  // this hint is done
  done_cv_.notify_all();
}

void KvMapper::run() {
  const Status bound = memory_.provider().bind_thread();
  {
    std::lock_guard lock(queue_mutex_);
    start_status_ = bound;
    ready_ = true;
  }
  done_cv_.notify_all();
  if (!bound.ok()) return;

  std::unique_lock queue_lock(queue_mutex_);
  for (;;) {
    if (dirty_slots_.empty() && prewarm_tokens_ == 0) {
      idle_ = true;
      done_cv_.notify_all();
    }
    work_cv_.wait(queue_lock,
                  [&] { return stop_ || !dirty_slots_.empty() || prewarm_tokens_ > 0; });
    idle_ = false;
    if (stop_) return;
    if (dirty_slots_.empty()) {
      prewarm_once(queue_lock);
      continue;
    }
    const std::uint64_t taken = posted_.load(std::memory_order_acquire);
    const std::uint64_t first = done_ticket_;
    work_.clear();
    for (const int s : dirty_slots_) {
      work_.push_back(Work{s, want_required_[s], want_desired_[s], want_generation_[s], false});
      want_required_[s] = 0;
      want_desired_[s] = 0;
      is_dirty_[s] = 0;
    }
    dirty_slots_.clear();
    queue_lock.unlock();

    // Required growth first: the step thread is (or soon will be) waiting.
    const Clock::time_point start = Clock::now();
    Status failure;
    for (Work& w : work_) {
      if (w.required == 0) continue;
      const KvMemory::MapLock map_lock = memory_.lock_mapping();
      const Status status = memory_.grow(
          map_lock, w.slot, w.required,
          GrowPolicy{.reclaim = true, .only_active = true, .generation = w.generation}, true);
      if (!status.ok()) {
        w.failed = true;
        if (failure.ok()) failure = status;
      }
    }
    double busy = seconds_since(start);

    queue_lock.lock();
    // Every ticket of the batch shares its outcome (usually one ticket).
    const std::uint64_t oldest_kept = taken >= kTicketHistory ? taken - kTicketHistory + 1 : 1;
    for (std::uint64_t t = std::max(first + 1, oldest_kept); t <= taken; ++t) {
      results_[t % kTicketHistory] = TicketResult{t, failure};
    }
    done_ticket_ = taken;
    done_cv_.notify_all();
    queue_lock.unlock();

    // Lookahead, best effort; abandoned as soon as newer work is posted.
    const Clock::time_point lookahead_start = Clock::now();
    for (const Work& w : work_) {
      if (posted_.load(std::memory_order_acquire) != taken) break;
      if (w.failed) continue;  // the waiter gets the failure; state stays rolled back
      const KvMemory::MapLock map_lock = memory_.lock_mapping();
      const Status status = memory_.grow(
          map_lock, w.slot, w.desired,
          GrowPolicy{.reclaim = false, .only_active = true, .generation = w.generation}, true);
      if (!status.ok() && status.code() != StatusCode::resource_exhausted) {
        VPOD_LOG_WARN("KV lookahead: {}", status.to_string());
      }
    }
    busy += seconds_since(lookahead_start);
    memory_.with_state(
        [&](SlotLedger&, KvStats& counters) { counters.mapper_busy_seconds += busy; });
    queue_lock.lock();
  }
}

Status KvMapper::wait(PrepareTicket ticket) {
  if (ticket == 0) return {};
  const Clock::time_point start = Clock::now();
  Status result;
  {
    std::unique_lock lock(queue_mutex_);
    if (ticket > posted_.load(std::memory_order_relaxed)) {
      return invalid_argument(fmt::format("wait: unknown prepare ticket {}", ticket));
    }
    done_cv_.wait(lock, [&] { return done_ticket_ >= ticket; });
    const TicketResult& outcome = results_[ticket % kTicketHistory];
    if (outcome.ticket != ticket) {
      return failed_precondition(fmt::format(
          "wait: prepare ticket {} is too old (the last {} are kept)", ticket, kTicketHistory));
    }
    result = outcome.status;
  }
  const double seconds = seconds_since(start);
  memory_.with_state([&](SlotLedger&, KvStats& counters) {
    counters.wait_calls += 1;
    counters.wait_seconds += seconds;
  });
  return result;
}

void KvMapper::drain() {
  std::unique_lock lock(queue_mutex_);
  done_cv_.wait(lock, [&] {
    return idle_ && dirty_slots_.empty() && prewarm_tokens_ == 0 && !prewarm_busy_;
  });
}

void KvMapper::expect_acquire(std::int64_t expected_tokens, std::int64_t first_tokens) {
  {
    std::lock_guard lock(queue_mutex_);
    prewarm_expected_ = expected_tokens;
    prewarm_tokens_ = first_tokens;
    ++prewarm_seq_;
  }
  if (first_tokens > 0) work_cv_.notify_one();
}

void KvMapper::settle_prewarm() {
  std::unique_lock lock(queue_mutex_);
  if (prewarm_tokens_ != 0) {
    prewarm_tokens_ = 0;
    ++prewarm_seq_;
  }
  done_cv_.wait(lock, [&] { return !prewarm_busy_; });
}

}  // namespace vpod::kvcache
