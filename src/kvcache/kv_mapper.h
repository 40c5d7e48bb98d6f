// The vAttention cache's background growth: one mapper thread that maps what
// prepare() posts, so the step thread only waits (wait(ticket)) when a step
// needs pages that are not mapped yet.
//
// Each post carries, per slot, a *required* depth (the step needs it) and a
// *desired* depth (required + lookahead, or a prompt's next chunk), merged
// per slot (max) with earlier posts not yet taken, and tagged with the slot's
// owner (generation): wants of a slot that changed owners are dropped. The
// mapper takes every pending want at once, does the required growth first
// (it may reclaim idle slots' pages), publishes the outcome to every ticket
// of the batch, then maps the desired depths (best effort: never reclaims,
// never fails a wait) and abandons them as soon as a newer post arrives.
// When nothing is posted it pre-maps, one chunk at a time, the free slot the
// next acquire() will pick (expect_acquire(), eager allocation); a newly
// posted growth waits for at most one chunk, and settle_prewarm() cancels
// the hint and waits for the chunk in flight.
//
// The queue mutex and two condition variables carry post -> mapper -> wait;
// the mapper never spins and is joined by the destructor. The queue mutex is
// taken before KvMemory's state mutex and never with its mapping mutex.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kvcache/kv_memory.h"
#include "kvcache/kv_store.h"

namespace vpod::kvcache {

class KvMapper {
 public:
  // `lookahead_tokens`: mapped beyond each entry's tokens (see desired_tokens).
  KvMapper(KvMemory& memory, std::int64_t lookahead_tokens);
  // Stops and joins the thread (posted work not yet taken is dropped).
  ~KvMapper();
  KvMapper(const KvMapper&) = delete;
  KvMapper& operator=(const KvMapper&) = delete;

  // Starts the thread and waits until it is bound to the provider's device.
  Status start();

  // Posts the growth of `next` (slots active, checked by the caller): each
  // entry's desired depth, and its required depth when `required` (some
  // entry's tokens are not mapped yet). Returns the ticket wait() takes when
  // `required`, else 0 (lookahead only).
  PrepareTicket post(std::span<const SlotTokens> next, bool required);
  // Returns once the ticket's required growth is done, with its Status. A
  // ticket can be waited on (any number of times) until kTicketHistory
  // newer posts have been made.
  Status wait(PrepareTicket ticket);
  // Returns once all posted work, lookahead and pre-mapping included, is done.
  void drain();
  // The next acquire()'s hint (0 first_tokens cancels); see KvCache.
  void expect_acquire(std::int64_t expected_tokens, std::int64_t first_tokens);
  void settle_prewarm();

  static constexpr std::uint64_t kTicketHistory = 1024;

 private:
  void run();
  // One chunk of pre-mapping; queue_lock is held on entry and on return.
  void prewarm_once(std::unique_lock<std::mutex>& queue_lock);

  // One slot's growth taken by the mapper, in depth steps.
  struct Work {
    int slot = 0;
    std::int64_t required = 0;  // 0: nothing required
    std::int64_t desired = 0;
    std::uint64_t generation = 0;  // the slot's owner when asked
    bool failed = false;           // required growth failed: no lookahead this round
  };

  KvMemory& memory_;
  const std::int64_t lookahead_tokens_;
  std::mutex queue_mutex_;
  std::condition_variable work_cv_;  // the mapper waits for posted work
  std::condition_variable done_cv_;  // wait(), drain(), settle_prewarm() wait on the mapper
  bool stop_ = false;
  bool ready_ = false;
  bool idle_ = false;                           // waiting for work, nothing in hand
  Status start_status_;                         // why the thread could not start
  std::atomic<std::uint64_t> posted_{0};        // every post, lookahead-only included
  std::uint64_t done_ticket_ = 0;               // required work finished through here
  std::vector<std::int64_t> want_required_;     // [max_slots] target depth, 0 = none
  std::vector<std::int64_t> want_desired_;      // [max_slots]
  std::vector<std::uint64_t> want_generation_;  // [max_slots] owner the wants belong to
  std::vector<int> dirty_slots_;
  std::vector<std::uint8_t> is_dirty_;
  std::vector<Work> work_;  // the batch in hand (mapper thread only)
  // expect_acquire() -> mapper. prewarm_tokens_ 0 = no hint.
  std::int64_t prewarm_expected_ = 0;
  std::int64_t prewarm_tokens_ = 0;
  std::uint64_t prewarm_seq_ = 0;  // bumped by every hint and cancel
  bool prewarm_busy_ = false;      // the mapper is mapping a chunk for a hint
  // The outcome of each of the last kTicketHistory tickets (ticket t at
  // t % kTicketHistory), written by the mapper when its batch is done.
  struct TicketResult {
    std::uint64_t ticket = 0;
    Status status;
  };
  std::vector<TicketResult> results_;
  std::thread thread_;
};

}  // namespace vpod::kvcache
