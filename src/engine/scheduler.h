// Sarathi-Serve style stall-free scheduling, as three small policy objects:
//   RequestQueue  - waiting requests, FCFS; preempted ones go back to the head
//   RunningSet    - admitted requests in arrival order (the newest is the
//                   preemption victim)
//   TokenBudget   - what is left of --max-num-batched-tokens this step
// and the Scheduler that combines them with a KvCapacity. Each step:
//   1. every running decode gets one token (growing its KV reservation; when
//      the cache is full the newest running request is preempted by
//      recomputation, possibly the one being grown);
//   2. partly prefilled running requests get prefill chunks, oldest first;
//   3. waiting requests are admitted FCFS while the budget, --max-num-seqs and
//      the KV cache allow (and no preemption happened this step); admission
//      reserves the request's whole prefill.
// Prefix caching: admission looks the request's known tokens up in the KV
// cache (PrefixQuery); the prefill starts at the first token the cache does
// not already hold (chunking unchanged), and after each launch the scheduler
// tells the cache how far every prompt in the step is computed
// (cache_prompts), so that later requests can share those blocks.
// The step is emitted as a HybridBatch plus the requests behind each sequence.
// Nothing here touches a GPU or a model: it is all testable on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/hybrid_batch.h"
#include "common/status.h"
#include "engine/model_executor.h"
#include "engine/request.h"
#include "kvcache/kv_capacity.h"

namespace vpod::engine {

struct SchedulerConfig {
  int max_num_seqs = 256;             // running requests at once
  int max_num_batched_tokens = 2048;  // tokens per step (decodes + prefill chunks)
  // Look each admission's tokens up in the KV cache's prefix cache (the
  // store itself may have it off: it then finds nothing). Off: no lookups,
  // and no prefix-cache queries are counted.
  bool prefix_caching = true;
};

Status validate(const SchedulerConfig& config);

// Waiting requests: an intrusive doubly linked list through Request's
// queue_prev/queue_next, so pushing and removing never allocate.
class RequestQueue {
 public:
  void push_back(Request* r);
  void push_front(Request* r);
  Request* front() const { return head_; }
  void remove(Request* r);
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  Request* head_ = nullptr;
  Request* tail_ = nullptr;
  std::size_t size_ = 0;
};

// Admitted requests ordered by arrival (oldest first). Capacity is reserved
// for --max-num-seqs, so inserting never allocates.
class RunningSet {
 public:
  explicit RunningSet(int max_num_seqs) { requests_.reserve(max_num_seqs); }
  void insert(Request* r);  // keeps arrival order
  void remove(Request* r);
  Request* newest() const { return requests_.empty() ? nullptr : requests_.back(); }
  std::size_t size() const { return requests_.size(); }
  bool empty() const { return requests_.empty(); }
  Request* operator[](std::size_t i) const { return requests_[i]; }

 private:
  std::vector<Request*> requests_;
};

class TokenBudget {
 public:
  explicit TokenBudget(int tokens) : remaining_(tokens) {}
  int remaining() const { return remaining_; }
  // Takes up to `want` tokens; returns how many were granted.
  int take(int want);

 private:
  int remaining_;
};

// One step's plan. Buffers are reserved at start-up and reused every step.
struct ScheduledStep {
  HybridBatch batch;
  std::vector<Request*> prefill_requests;  // parallel to batch.prefills
  std::vector<Request*> decode_requests;   // parallel to batch.decodes
  std::vector<SampleSpec> samples;         // sequences that sample, in flattened order
  std::vector<Request*> sample_requests;   // parallel to samples
  // Prompt logprobs: the prefill chunks' rows to score, and their requests
  // (parallel); the scored rows total at most the step's tokens.
  std::vector<PromptScoreSpec> scores;
  std::vector<Request*> score_requests;
  int num_scored_rows = 0;
  // Requests the cache can never back (even alone): the engine fails them.
  std::vector<Request*> unschedulable;
  std::vector<Request*> admitted;  // admitted for the first time this step (queue time)
  int num_preempted = 0;
  // Prefix cache, over this step's admissions: tokens looked up and tokens
  // found (vLLM's queries and hits).
  std::int64_t prefix_cache_queries = 0;
  std::int64_t prefix_cache_hits = 0;

  bool empty() const { return batch.empty(); }
  void clear();
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, kvcache::KvCapacity& kv);

  // A new request joins the tail of the waiting queue.
  void add(Request* r);
  // Plans the next step. `now` stamps first admission (queue time). The
  // result stays valid until the next call.
  const ScheduledStep& schedule(Clock::time_point now);
  // After the forward: advances each scheduled request's cached length and
  // appends the sampled tokens (parallel to step.samples), except to
  // requests that ended while the step ran (pipelined loop: a stop string
  // found late); the engine then releases those.
  void commit(const ScheduledStep& step, std::span<const SampledToken> sampled);
  // Once `step` is launched (its kernels queued, before commit): reports to
  // the KV cache how far each prefill chunk leaves its prompt computed
  // (KvCapacity::cache_prompt), so the cache can index those blocks.
  void cache_prompts(const ScheduledStep& step);
  // Takes a finished or aborted request out (waiting or running) and frees its slot.
  void remove(Request* r);

  std::size_t num_running() const { return running_.size(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  const SchedulerConfig& config() const { return config_; }

 private:
  // Grows r's reservation for one more token, preempting the newest running
  // requests until it fits. False if r itself was preempted (or is unschedulable).
  bool grow_or_preempt(Request* r);
  void preempt(Request* victim);
  void admit(Request* r, Clock::time_point now);
  // What admission looks up for r: its known tokens under its salt (nothing
  // when prefix caching is off).
  kvcache::PrefixQuery prefix_query(const Request& r) const;
  void lay_out_batch();
  // Adds the prompt rows of r's sequence `s` (just laid out) to score.
  void add_prompt_scores(Request* r, const BatchSequence& s);

  SchedulerConfig config_;
  kvcache::KvCapacity& kv_;
  RequestQueue waiting_;
  RunningSet running_;
  ScheduledStep step_;
  // Chosen this step before the batch is laid out (prefills first in the
  // flattened list, although decodes are chosen first).
  std::vector<Request*> chosen_prefills_;
  std::vector<int> chosen_prefill_lens_;
};

}  // namespace vpod::engine
