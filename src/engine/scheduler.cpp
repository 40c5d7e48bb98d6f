// The scheduler (scheduler.h): the waiting queue, the running set, the token
// budget planner and admission and preemption against KV capacity.
#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "common/check.h"

namespace vpod::engine {

Status validate(const SchedulerConfig& c) {
  if (c.max_num_seqs < 1)
    return invalid_argument("--max-num-seqs must be >= 1, got " + std::to_string(c.max_num_seqs));
  // Every running request decodes one token per step, so the budget must
  // cover a full batch of decodes (stall-free: decodes are never skipped).
  if (c.max_num_batched_tokens < c.max_num_seqs)
    return invalid_argument("--max-num-batched-tokens (" +
                            std::to_string(c.max_num_batched_tokens) +
                            ") must be >= --max-num-seqs (" + std::to_string(c.max_num_seqs) + ")");
  return {};
}

// ---------------------------------------------------------------------------
// RequestQueue
// ---------------------------------------------------------------------------
void RequestQueue::push_back(Request* r) {
  VPOD_CHECK(!r->queued);
  r->queue_prev = tail_;
  r->queue_next = nullptr;
  if (tail_)
    tail_->queue_next = r;
  else
    head_ = r;
  tail_ = r;
  r->queued = true;
  ++size_;
}

void RequestQueue::push_front(Request* r) {
  VPOD_CHECK(!r->queued);
  r->queue_prev = nullptr;
  r->queue_next = head_;
  if (head_)
    head_->queue_prev = r;
  else
    tail_ = r;
  head_ = r;
  r->queued = true;
  ++size_;
}

void RequestQueue::remove(Request* r) {
  VPOD_CHECK(r->queued);
  if (r->queue_prev)
    r->queue_prev->queue_next = r->queue_next;
  else
    head_ = r->queue_next;
  if (r->queue_next)
    r->queue_next->queue_prev = r->queue_prev;
  else
    tail_ = r->queue_prev;
  r->queue_prev = r->queue_next = nullptr;
  r->queued = false;
  --size_;
}

// ---------------------------------------------------------------------------
// RunningSet
// ---------------------------------------------------------------------------
void RunningSet::insert(Request* r) {
  VPOD_CHECK_MSG(requests_.size() < requests_.capacity(), "running set over --max-num-seqs");
  auto pos = std::upper_bound(
      requests_.begin(), requests_.end(), r,
      [](const Request* a, const Request* b) { return a->arrival_seq < b->arrival_seq; });
  requests_.insert(pos, r);
}

void RunningSet::remove(Request* r) {
  auto it = std::find(requests_.begin(), requests_.end(), r);
  VPOD_CHECK(it != requests_.end());
  requests_.erase(it);
}

int TokenBudget::take(int want) {
  const int granted = std::min(want, remaining_);
  remaining_ -= granted;
  return granted;
}

void ScheduledStep::clear() {
  batch.clear();
  prefill_requests.clear();
  decode_requests.clear();
  samples.clear();
  sample_requests.clear();
  scores.clear();
  score_requests.clear();
  num_scored_rows = 0;
  unschedulable.clear();
  admitted.clear();
  num_preempted = 0;
  prefix_cache_queries = 0;
  prefix_cache_hits = 0;
}

// ---------------------------------------------------------------------------
// Scheduler
// ---------------------------------------------------------------------------
Scheduler::Scheduler(const SchedulerConfig& config, kvcache::KvCapacity& kv)
    : config_(config), kv_(kv), running_(config.max_num_seqs) {
  VPOD_CHECK_MSG(validate(config).ok(), validate(config).to_string());
  const int max_seqs = config.max_num_seqs;
  const int max_tokens = config.max_num_batched_tokens;
  step_.batch.prefills.reserve(max_seqs);
  step_.batch.decodes.reserve(max_seqs);
  step_.batch.token_ids.reserve(max_tokens);
  step_.batch.positions.reserve(max_tokens);
  step_.prefill_requests.reserve(max_seqs);
  step_.decode_requests.reserve(max_seqs);
  step_.samples.reserve(max_seqs);
  step_.scores.reserve(max_seqs);
  step_.score_requests.reserve(max_seqs);
  step_.sample_requests.reserve(max_seqs);
  step_.unschedulable.reserve(max_seqs);
  step_.admitted.reserve(max_seqs);
  chosen_prefills_.reserve(max_seqs);
  chosen_prefill_lens_.reserve(max_seqs);
}

void Scheduler::add(Request* r) {
  VPOD_CHECK(r->state == RequestState::waiting);
  waiting_.push_back(r);
}

void Scheduler::preempt(Request* victim) {
  kv_.free(victim->slot);
  victim->slot = -1;
  victim->num_computed = 0;
  victim->state = RequestState::preempted;
  ++victim->num_preemptions;
  running_.remove(victim);
  waiting_.push_front(victim);
  ++step_.num_preempted;
}

bool Scheduler::grow_or_preempt(Request* r) {
  while (!kv_.grow(r->slot, r->num_tokens())) {
    Request* victim = running_.newest();
    if (victim == r && running_.size() == 1) {
      // Alone and still too big: no preemption can help. The engine fails it
      // (the start-up checks make this unreachable with a consistent config).
      kv_.free(r->slot);
      r->slot = -1;
      running_.remove(r);
      step_.unschedulable.push_back(r);
      return false;
    }
    preempt(victim);
    if (victim == r) return false;
  }
  return true;
}

kvcache::PrefixQuery Scheduler::prefix_query(const Request& r) const {
  // Prompt logprobs need every prompt position computed: such a request
  // looks nothing up (its blocks are still cached for others).
  if (!config_.prefix_caching || r.sampling.prompt_logprobs) return {};
  return {.tokens = r.token_ids, .salt = r.cache_salt};
}

// After a preemption r's known tokens are its prompt and outputs: all of
// them are looked up (a store indexes prompt blocks only, so the hit ends
// within the prompt).
void Scheduler::admit(Request* r, Clock::time_point now) {
  waiting_.remove(r);
  const kvcache::Allocation a = kv_.allocate(r->num_tokens(), prefix_query(*r));
  VPOD_CHECK_MSG(a.cached_tokens >= 0 && a.cached_tokens < r->num_tokens(),
                 "the KV cache must leave a request's last token uncached");
  r->slot = a.slot;
  r->num_computed = a.cached_tokens;  // the prefill starts at the first uncached token
  r->state = RequestState::prefilling;
  if (config_.prefix_caching) {
    step_.prefix_cache_queries += r->num_tokens();
    step_.prefix_cache_hits += a.cached_tokens;
  }
  if (!r->first_scheduled_time) {
    r->first_scheduled_time = now;
    r->num_cached_tokens = a.cached_tokens;
    step_.admitted.push_back(r);
  }
  running_.insert(r);
}

const ScheduledStep& Scheduler::schedule(Clock::time_point now) {
  step_.clear();
  chosen_prefills_.clear();
  chosen_prefill_lens_.clear();
  TokenBudget budget(config_.max_num_batched_tokens);

  // 1. Every running decode, one token each, oldest first. Victims are taken
  //    from the newest end, which this loop has not reached yet.
  for (std::size_t i = 0; i < running_.size();) {
    Request* r = running_[i];
    if (r->state != RequestState::decoding) {
      ++i;
      continue;
    }
    if (!grow_or_preempt(r)) continue;  // r left the running set; i now names the next one
    VPOD_CHECK(budget.take(1) == 1);    // guaranteed: budget >= max_num_seqs >= decodes
    step_.decode_requests.push_back(r);
    ++i;
  }

  // 2. Prefill chunks of admitted, partly prefilled requests, oldest first.
  //    Their whole prefill was reserved at admission.
  for (std::size_t i = 0; i < running_.size() && budget.remaining() > 0; ++i) {
    Request* r = running_[i];
    // A max_tokens 0 request whose prompt is computed ends at its collect,
    // before this schedule; never lay out an empty chunk.
    if (r->state != RequestState::prefilling || r->num_uncomputed() == 0) continue;
    chosen_prefills_.push_back(r);
    chosen_prefill_lens_.push_back(budget.take(r->num_uncomputed()));
  }

  // 3. Admit waiting requests, strictly FCFS: when the head cannot be backed,
  //    nobody behind it jumps the queue (so large requests do not starve).
  //    Not in a step that had to preempt: the cache is full, and admitting
  //    now would only hand the victim's pages to a newer request.
  while (step_.num_preempted == 0 && budget.remaining() > 0 && !waiting_.empty() &&
         running_.size() < static_cast<std::size_t>(config_.max_num_seqs)) {
    Request* r = waiting_.front();
    if (!kv_.can_allocate(r->num_tokens(), prefix_query(*r))) {
      if (running_.empty()) {  // the empty cache cannot back it: it never will
        waiting_.remove(r);
        step_.unschedulable.push_back(r);
        continue;
      }
      break;
    }
    admit(r, now);
    chosen_prefills_.push_back(r);
    chosen_prefill_lens_.push_back(budget.take(r->num_uncomputed()));
  }

  // The next admission's first chunk, so the KV cache can get its pages ready
  // while this step runs (FCFS: it is the head of the queue, if anyone's).
  const Request* head = waiting_.front();
  kv_.expect_admission(
      head != nullptr ? head->num_tokens() : 0,
      head != nullptr ? std::min(head->num_tokens(), config_.max_num_batched_tokens) : 0);

  lay_out_batch();
  return step_;
}

// Flattened order: [prefill chunks | decodes]; a sequence samples when its
// new tokens reach the end of the request's known tokens.
void Scheduler::lay_out_batch() {
  HybridBatch& b = step_.batch;
  auto add_sequence = [&](Request* r, int num_new, std::vector<BatchSequence>& seqs) {
    BatchSequence s;
    s.slot = r->slot;
    s.cached_len = r->num_computed;
    s.num_new = num_new;
    s.token_offset = static_cast<int>(b.token_ids.size());
    seqs.push_back(s);
    for (int i = 0; i < num_new; ++i) {
      b.token_ids.push_back(r->token_ids[r->num_computed + i]);
      b.positions.push_back(r->num_computed + i);
    }
    if (r->sampling.prompt_logprobs) add_prompt_scores(r, s);
    if (r->num_computed + num_new < r->num_tokens() || r->score_only()) return;
    SampleSpec spec;
    spec.token_index = s.token_offset + num_new - 1;
    spec.sequence_index = static_cast<int>(b.prefills.size() + b.decodes.size()) - 1;
    spec.params = &r->sampling;
    spec.seed = r->seed;
    spec.output_index = r->num_generated();
    spec.num_prompt_tokens = r->num_prompt_tokens;
    spec.token_ids = r->token_ids;
    if (r->num_generated() < r->stop.min_tokens) spec.suppressed_ids = r->stop_ids;
    spec.num_logprobs = r->sampling.logprobs.value_or(-1);
    spec.grammar = r->grammar.get();
    step_.samples.push_back(spec);
    step_.sample_requests.push_back(r);
  };
  for (std::size_t i = 0; i < chosen_prefills_.size(); ++i) {
    add_sequence(chosen_prefills_[i], chosen_prefill_lens_[i], b.prefills);
    step_.prefill_requests.push_back(chosen_prefills_[i]);
  }
  for (Request* r : step_.decode_requests) add_sequence(r, 1, b.decodes);
}

// Position p's row predicts token p + 1: the chunk scores the prompt tokens
// it predicts that no earlier step scored (a recompute after preemption
// scores nothing twice).
void Scheduler::add_prompt_scores(Request* r, const BatchSequence& s) {
  const int begin = std::max(s.cached_len, r->num_prompt_scored());
  const int end = std::min(s.context_len(), r->num_prompt_tokens - 1);
  if (begin >= end) return;
  VPOD_CHECK_MSG(begin == r->num_prompt_scored(), "prompt positions must be scored in order");
  PromptScoreSpec spec;
  spec.first_row = s.token_offset + (begin - s.cached_len);
  spec.num_rows = end - begin;
  spec.num_top = *r->sampling.prompt_logprobs;
  spec.targets = std::span<const std::int32_t>(r->token_ids).subspan(begin + 1, end - begin);
  step_.scores.push_back(spec);
  step_.score_requests.push_back(r);
  step_.num_scored_rows += spec.num_rows;
}

void Scheduler::commit(const ScheduledStep& step, std::span<const SampledToken> sampled) {
  VPOD_CHECK(sampled.size() == step.samples.size());
  for (std::size_t i = 0; i < step.prefill_requests.size(); ++i)
    step.prefill_requests[i]->num_computed += step.batch.prefills[i].num_new;
  // Every decode samples; decodes' samples come after the prefills'. A
  // deferred decode (structured output) is not computed: it reruns.
  const std::size_t first_decode = step.samples.size() - step.decode_requests.size();
  for (std::size_t j = 0; j < step.decode_requests.size(); ++j) {
    VPOD_CHECK(step.sample_requests[first_decode + j] == step.decode_requests[j]);
    if (!sampled[first_decode + j].deferred) step.decode_requests[j]->num_computed += 1;
  }
  for (std::size_t i = 0; i < step.sample_requests.size(); ++i) {
    Request* r = step.sample_requests[i];
    if (r->is_done()) continue;  // ended while the step ran: its token is dropped
    if (sampled[i].deferred) {
      VPOD_CHECK_MSG(i >= first_decode, "only decode samples are deferred");
      continue;
    }
    VPOD_CHECK(r->num_computed == r->num_tokens());
    VPOD_CHECK_MSG(r->token_ids.size() < r->token_ids.capacity(),
                   "token_ids must be reserved for prompt + max_tokens");
    r->token_ids.push_back(sampled[i].token);
    r->state = RequestState::decoding;
  }
}

void Scheduler::cache_prompts(const ScheduledStep& step) {
  for (std::size_t i = 0; i < step.prefill_requests.size(); ++i) {
    const Request* r = step.prefill_requests[i];
    const BatchSequence& s = step.batch.prefills[i];
    const int computed = std::min(s.cached_len + s.num_new, r->num_prompt_tokens);
    kv_.cache_prompt(s.slot, std::span(r->token_ids.data(), r->num_prompt_tokens), computed);
  }
}

void Scheduler::remove(Request* r) {
  if (r->queued) {
    waiting_.remove(r);
    return;
  }
  if (r->slot >= 0) {
    kv_.free(r->slot);
    r->slot = -1;
    running_.remove(r);
  }
}

}  // namespace vpod::engine
