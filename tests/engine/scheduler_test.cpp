// Policy tests of the scheduler alone: no engine thread, no model, no GPU.
// A simulation drives Scheduler with the HashModel double (which checks every
// token is fed once, in order, in the right slot) and checks the Sarathi
// invariants after every step.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "engine_doubles.h"

namespace vpod::engine {
namespace {

using testing::FakeKvCache;
using testing::HashModel;
using testing::SlotMemory;

constexpr int kVocab = 1000;

struct SimConfig {
  SchedulerConfig scheduler;
  int num_slots = 64;
  int num_blocks = 1024;
  int block_tokens = 16;
  int max_tokens_per_slot = 4096;
  bool prefix_caching = false;  // the FakeKvCache's own prefix cache
};

// Drives a Scheduler step by step; requests finish after max_tokens tokens.
class Sim {
 public:
  explicit Sim(const SimConfig& c)
      : config(c),
        kv(c.num_slots, c.num_blocks, c.block_tokens, c.max_tokens_per_slot, &memory,
           c.prefix_caching),
        model(&memory, kVocab),
        scheduler(c.scheduler, kv),
        sampled(c.scheduler.max_num_seqs) {}

  Request* add(int prompt_len, int max_tokens) {
    auto r = std::make_unique<Request>();
    r->id = next_seq + 1;
    r->arrival_seq = next_seq++;
    r->sampling.temperature = 0.0f;
    r->stop.max_tokens = max_tokens;
    r->num_prompt_tokens = prompt_len;
    r->max_total_tokens = prompt_len + max_tokens;
    r->token_ids.reserve(r->max_total_tokens);
    for (int i = 0; i < prompt_len; ++i)
      r->token_ids.push_back(static_cast<std::int32_t>((r->arrival_seq * 7919 + i) % kVocab));
    scheduler.add(r.get());
    requests.push_back(std::move(r));
    return requests.back().get();
  }
  // A request with the given prompt (and cache salt).
  Request* add_prompt(const std::vector<std::int32_t>& prompt, int max_tokens,
                      std::uint64_t salt = 0) {
    auto r = std::make_unique<Request>();
    r->id = next_seq + 1;
    r->arrival_seq = next_seq++;
    r->sampling.temperature = 0.0f;
    r->stop.max_tokens = max_tokens;
    r->num_prompt_tokens = static_cast<int>(prompt.size());
    r->max_total_tokens = r->num_prompt_tokens + max_tokens;
    r->token_ids.reserve(r->max_total_tokens);
    r->token_ids = prompt;
    r->cache_salt = salt;
    scheduler.add(r.get());
    requests.push_back(std::move(r));
    return requests.back().get();
  }

  // One step; returns the batch's token count. Checks the per-step invariants.
  int step() {
    std::vector<Request*> decoding_before, running_before;
    for (auto& r : requests) {
      if (r->state == RequestState::decoding) decoding_before.push_back(r.get());
      if (r->is_running()) running_before.push_back(r.get());
    }

    const ScheduledStep& s = scheduler.schedule(Clock::now());
    ++num_steps;
    const HybridBatch& b = s.batch;
    // The token budget and the sequence cap hold.
    EXPECT_LE(b.num_tokens(), config.scheduler.max_num_batched_tokens);
    EXPECT_LE(b.prefills.size() + b.decodes.size(),
              static_cast<std::size_t>(config.scheduler.max_num_seqs));
    EXPECT_LE(scheduler.num_running(), static_cast<std::size_t>(config.scheduler.max_num_seqs));
    EXPECT_EQ(s.prefill_requests.size(), b.prefills.size());
    EXPECT_EQ(s.decode_requests.size(), b.decodes.size());
    EXPECT_TRUE(s.unschedulable.empty());
    // Decodes are never skipped: every request that was decoding runs a
    // decode, unless it was preempted this step.
    for (Request* r : decoding_before) {
      const bool decoded = std::count(s.decode_requests.begin(), s.decode_requests.end(), r) == 1;
      EXPECT_TRUE(decoded || r->state == RequestState::preempted)
          << "request " << r->id << " skipped a decode";
    }
    // Victims are the newest: every request preempted this step arrived after
    // every request still running.
    std::uint64_t newest_running = 0;
    for (auto& r : requests)
      if (r->is_running()) newest_running = std::max(newest_running, r->arrival_seq);
    for (Request* r : running_before)
      if (r->state == RequestState::preempted) {
        EXPECT_GT(r->arrival_seq, newest_running);
        EXPECT_EQ(r->slot, -1);
        EXPECT_EQ(r->num_computed, 0);
      }
    preemptions += s.num_preempted;
    // Stall-free: a step leaves budget unused only if no more prefill work
    // could be taken (every running prefill got all it needs, and the
    // waiting head cannot be admitted or nobody waits).
    if (b.num_tokens() < config.scheduler.max_num_batched_tokens) {
      for (std::size_t i = 0; i < s.prefill_requests.size(); ++i)
        EXPECT_EQ(b.prefills[i].num_new, s.prefill_requests[i]->num_uncomputed());
      const Request* head = first_waiting();
      if (head && s.num_preempted == 0 &&
          scheduler.num_running() < static_cast<std::size_t>(config.scheduler.max_num_seqs)) {
        EXPECT_FALSE(kv.can_allocate(head->num_tokens(), {head->token_ids, head->cache_salt}))
            << "budget left and request " << head->id << " could have been admitted";
      }
    }
    // The waiting queue stays in arrival order (preempted requests go back
    // to the head and are older than every never-admitted one).
    std::uint64_t last = 0;
    bool first = true;
    for (const Request* r = first_waiting(); r; r = r->queue_next) {
      if (!first) {
        EXPECT_GT(r->arrival_seq, last);
      }
      last = r->arrival_seq;
      first = false;
    }
    for (Request* r : s.admitted) admission_order.push_back(r->arrival_seq);
    // Every prefill chunk computes something (a fully cached request still
    // computes its last token).
    for (const BatchSequence& p : b.prefills) EXPECT_GE(p.num_new, 1);
    hit_tokens += s.prefix_cache_hits;
    query_tokens += s.prefix_cache_queries;

    if (s.empty()) return 0;
    EXPECT_TRUE(kv.prepare(b).ok());
    scheduler.cache_prompts(s);  // as the engine does once the step is launched
    if (config.prefix_caching) kv.check();
    const std::span<SampledToken> out(sampled.data(), s.samples.size());
    EXPECT_TRUE(model.forward(b, s.samples, out, {}).ok());
    scheduler.commit(s, out);
    for (Request* r : s.sample_requests) {
      if (r->num_generated() >= r->stop.max_tokens) {
        r->state = RequestState::finished;
        scheduler.remove(r);
        finish_step[r->id] = num_steps;
      }
    }
    return b.num_tokens();
  }

  // Steps until every request finished; false if that takes over `max_steps`.
  bool run(int max_steps = 100000) {
    for (int i = 0; i < max_steps && !done(); ++i) {
      step();
      if (::testing::Test::HasFailure()) return false;
    }
    return done();
  }

  bool done() const {
    return std::all_of(requests.begin(), requests.end(),
                       [](const auto& r) { return r->state == RequestState::finished; });
  }
  const Request* first_waiting() const {
    for (auto& r : requests)
      if (r->queued && r->queue_prev == nullptr) return r.get();
    return nullptr;
  }

  SimConfig config;
  SlotMemory memory;
  FakeKvCache kv;
  HashModel model;
  Scheduler scheduler;
  std::vector<SampledToken> sampled;
  std::vector<std::unique_ptr<Request>> requests;
  std::uint64_t next_seq = 0;
  int num_steps = 0;
  int preemptions = 0;
  long hit_tokens = 0, query_tokens = 0;  // the steps' prefix-cache counts
  std::vector<std::uint64_t> admission_order;
  std::map<RequestId, int> finish_step;
};

// The tokens a request generates when it runs alone in an unconstrained cache.
std::vector<std::int32_t> run_alone(const Request& like) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 4, .max_num_batched_tokens = 64};
  Sim solo(c);
  Request* r = solo.add(like.num_prompt_tokens, like.stop.max_tokens);
  r->token_ids.assign(like.token_ids.begin(), like.token_ids.begin() + like.num_prompt_tokens);
  EXPECT_TRUE(solo.run());
  return {r->token_ids.begin() + r->num_prompt_tokens, r->token_ids.end()};
}

TEST(RequestQueue, FifoWithHeadInsertionAndRemoval) {
  Request a, b, c, d;
  RequestQueue q;
  q.push_back(&a);
  q.push_back(&b);
  q.push_front(&c);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.front(), &c);
  q.remove(&a);
  EXPECT_EQ(q.front(), &c);
  EXPECT_EQ(c.queue_next, &b);
  EXPECT_EQ(b.queue_next, nullptr);
  q.remove(&c);
  EXPECT_EQ(q.front(), &b);
  q.push_back(&d);
  q.remove(&b);
  EXPECT_EQ(q.front(), &d);
  q.remove(&d);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front(), nullptr);
}

TEST(RunningSet, KeepsArrivalOrderAndNamesTheNewest) {
  Request r[4];
  for (int i = 0; i < 4; ++i) r[i].arrival_seq = 10 * i;
  RunningSet set(4);
  set.insert(&r[2]);
  set.insert(&r[0]);
  set.insert(&r[3]);
  set.insert(&r[1]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(set[i], &r[i]);
  EXPECT_EQ(set.newest(), &r[3]);
  set.remove(&r[3]);
  EXPECT_EQ(set.newest(), &r[2]);
}

TEST(TokenBudget, GrantsAtMostWhatIsLeft) {
  TokenBudget b(10);
  EXPECT_EQ(b.take(4), 4);
  EXPECT_EQ(b.take(8), 6);
  EXPECT_EQ(b.take(1), 0);
  EXPECT_EQ(b.remaining(), 0);
}

TEST(SchedulerConfig, RejectsABudgetSmallerThanTheBatch) {
  EXPECT_FALSE(validate(SchedulerConfig{.max_num_seqs = 0, .max_num_batched_tokens = 8}).ok());
  const Status s = validate(SchedulerConfig{.max_num_seqs = 16, .max_num_batched_tokens = 8});
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("--max-num-batched-tokens"), std::string::npos);
  EXPECT_TRUE(validate(SchedulerConfig{.max_num_seqs = 8, .max_num_batched_tokens = 8}).ok());
}

TEST(Scheduler, ChunksALongPromptAcrossSteps) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 100};
  Sim sim(c);
  Request* r = sim.add(/*prompt_len=*/350, /*max_tokens=*/3);
  std::vector<int> cached, chunk;
  while (r->state != RequestState::decoding && cached.size() < 10) {
    const int before = r->num_computed;
    cached.push_back(before);
    chunk.push_back(sim.step());
  }
  EXPECT_EQ(cached, (std::vector<int>{0, 100, 200, 300}));
  EXPECT_EQ(chunk, (std::vector<int>{100, 100, 100, 50}));
  EXPECT_EQ(r->num_generated(), 1);  // sampled by the last chunk only
  EXPECT_EQ(r->num_computed, 350);
}

TEST(Scheduler, PrefillChunksShareAStepWithDecodes) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 100};
  Sim sim(c);
  Request* a = sim.add(/*prompt_len=*/250, /*max_tokens=*/5);
  // Step 1: a's first chunk takes the whole budget.
  const ScheduledStep& s1 = sim.scheduler.schedule(Clock::now());
  ASSERT_EQ(s1.batch.prefills.size(), 1u);
  EXPECT_EQ(s1.batch.prefills[0].num_new, 100);
  EXPECT_EQ(s1.batch.prefills[0].cached_len, 0);
  EXPECT_TRUE(s1.samples.empty());  // a partial chunk samples nothing
  std::vector<SampledToken> none;
  sim.kv.prepare(s1.batch).ok();
  sim.model.forward(s1.batch, s1.samples, {}, {}).ok();
  sim.scheduler.commit(s1, none);
  EXPECT_EQ(a->num_computed, 100);

  Request* b = sim.add(/*prompt_len=*/30, /*max_tokens=*/5);
  Request* c2 = sim.add(/*prompt_len=*/40, /*max_tokens=*/5);
  // Step 2: a's second chunk (100), then nothing left for b and c.
  EXPECT_EQ(sim.step(), 100);
  EXPECT_EQ(a->num_computed, 200);
  EXPECT_EQ(b->state, RequestState::waiting);
  // Step 3: a's last 50 tokens (samples), then b (30) and 20 tokens of c: three chunks.
  const ScheduledStep& s3 = sim.scheduler.schedule(Clock::now());
  ASSERT_EQ(s3.batch.prefills.size(), 3u);
  EXPECT_EQ(s3.prefill_requests[0], a);
  EXPECT_EQ(s3.batch.prefills[0].num_new, 50);
  EXPECT_EQ(s3.prefill_requests[1], b);
  EXPECT_EQ(s3.batch.prefills[1].num_new, 30);
  EXPECT_EQ(s3.prefill_requests[2], c2);
  EXPECT_EQ(s3.batch.prefills[2].num_new, 20);
  EXPECT_EQ(s3.batch.num_tokens(), 100);
  ASSERT_EQ(s3.samples.size(), 2u);  // a and b complete; c's chunk is partial
  EXPECT_EQ(s3.samples[0].token_index, 49);
  EXPECT_EQ(s3.samples[1].token_index, 79);
  EXPECT_EQ(s3.samples[0].sequence_index, 0);
  EXPECT_EQ(s3.samples[1].sequence_index, 1);
  std::vector<SampledToken> out(2);
  sim.kv.prepare(s3.batch).ok();
  sim.model.forward(s3.batch, s3.samples, out, {}).ok();
  sim.scheduler.commit(s3, out);
  EXPECT_EQ(a->state, RequestState::decoding);
  EXPECT_EQ(b->state, RequestState::decoding);
  EXPECT_EQ(c2->state, RequestState::prefilling);
  // Step 4: two decodes first, then c's remaining 20 tokens; decodes sit after
  // the prefill chunk in the flattened list.
  const ScheduledStep& s4 = sim.scheduler.schedule(Clock::now());
  ASSERT_EQ(s4.batch.decodes.size(), 2u);
  ASSERT_EQ(s4.batch.prefills.size(), 1u);
  EXPECT_EQ(s4.batch.prefills[0].num_new, 20);
  EXPECT_EQ(s4.batch.prefills[0].cached_len, 20);
  EXPECT_EQ(s4.batch.decodes[0].token_offset, 20);
  EXPECT_EQ(s4.batch.decodes[1].token_offset, 21);
  EXPECT_EQ(s4.batch.decodes[0].cached_len, 250);
  EXPECT_EQ(s4.batch.positions[20], 250);
  EXPECT_EQ(s4.batch.token_ids[20], a->token_ids[250]);
  ASSERT_EQ(s4.samples.size(), 3u);
  EXPECT_EQ(s4.samples[0].sequence_index, 0);  // c's last chunk
  EXPECT_EQ(s4.samples[2].sequence_index, 2);  // b's decode
}

TEST(Scheduler, AdmitsOnlyWhatTheKvCacheCanBackAndUpToMaxNumSeqs) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 3, .max_num_batched_tokens = 512};
  c.num_blocks = 10;  // 160 tokens
  c.block_tokens = 16;
  Sim sim(c);
  Request* a = sim.add(60, 4);  // 4 blocks
  Request* b = sim.add(60, 4);  // 4 blocks
  Request* d = sim.add(60, 4);  // would need 4 more: only 2 left
  Request* e = sim.add(10, 4);  // fits, but FCFS keeps it behind d
  const ScheduledStep& s = sim.scheduler.schedule(Clock::now());
  EXPECT_EQ(s.batch.prefills.size(), 2u);
  EXPECT_EQ(a->state, RequestState::prefilling);
  EXPECT_EQ(b->state, RequestState::prefilling);
  EXPECT_EQ(d->state, RequestState::waiting);
  EXPECT_EQ(e->state, RequestState::waiting);
  EXPECT_EQ(sim.kv.used_blocks(), 8);

  SimConfig c2;
  c2.scheduler = {.max_num_seqs = 2, .max_num_batched_tokens = 512};
  Sim capped(c2);
  for (int i = 0; i < 5; ++i) capped.add(10, 4);
  const ScheduledStep& s2 = capped.scheduler.schedule(Clock::now());
  EXPECT_EQ(s2.batch.prefills.size(), 2u);
  EXPECT_EQ(capped.scheduler.num_running(), 2u);
  EXPECT_EQ(capped.scheduler.num_waiting(), 3u);
}

TEST(Scheduler, PreemptsTheNewestByRecomputationAndReadmitsItAtTheHead) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 256};
  c.num_blocks = 8;  // 8 blocks of 4 tokens = 32 tokens in all
  c.block_tokens = 4;
  c.max_tokens_per_slot = 32;
  Sim sim(c);
  Request* old = sim.add(8, 12);    // grows to 20 tokens: 5 blocks
  Request* young = sim.add(8, 12);  // the same
  Request* later = sim.add(4, 2);   // arrives after both
  sim.step();                       // both prefill (2 + 2 blocks), `later` too (1 block)
  EXPECT_EQ(later->state, RequestState::decoding);
  // Decode until the cache cannot grow `old`: then `later` or `young`,
  // whichever is newest and running, is preempted - never `old`.
  bool saw_young_preempted = false;
  for (int i = 0; i < 1000 && !sim.done(); ++i) {
    sim.step();
    EXPECT_NE(old->state, RequestState::preempted);
    EXPECT_EQ(old->num_preemptions, 0);
    if (young->state == RequestState::preempted) {
      saw_young_preempted = true;
      // Re-queued at the head, ahead of nothing older.
      EXPECT_EQ(sim.first_waiting(), young);
    }
  }
  ASSERT_TRUE(sim.done());
  EXPECT_TRUE(saw_young_preempted);
  EXPECT_GT(sim.preemptions, 0);
  EXPECT_GE(young->num_preemptions, 1);
  // Recomputation is exact: the outputs equal the requests run alone.
  for (Request* r : {old, young, later})
    EXPECT_EQ(
        std::vector<std::int32_t>(r->token_ids.begin() + r->num_prompt_tokens, r->token_ids.end()),
        run_alone(*r))
        << "request " << r->id;
  EXPECT_EQ(sim.kv.used_blocks(), 0);
  EXPECT_EQ(sim.kv.slots_in_use(), 0);
}

TEST(Scheduler, AVictimGoesBackAheadOfWaitingRequestsAndNothingIsAdmitted) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 256};
  c.num_blocks = 4;
  c.block_tokens = 4;
  c.max_tokens_per_slot = 16;
  Sim sim(c);
  Request* a = sim.add(4, 8);  // 1 block; needs a 2nd at its 5th token
  Request* b = sim.add(7, 8);  // 2 blocks; needs a 3rd at its 9th token
  sim.step();                  // both prefilled: 3 blocks used, 1 free
  Request* w = sim.add(1, 1);  // would fit in a freed block
  // Step: a grows into the last block. Next: b needs a 3rd block, there is
  // none, b (the newest) is preempted, and w is not admitted in that step.
  for (int i = 0; i < 8 && b->num_preemptions == 0; ++i) {
    const ScheduledStep& s = sim.scheduler.schedule(Clock::now());
    if (s.num_preempted > 0) {
      EXPECT_TRUE(s.admitted.empty());
      EXPECT_EQ(w->state, RequestState::waiting);
      EXPECT_EQ(sim.first_waiting(), b);
      EXPECT_EQ(b->queue_next, w);
    }
    std::vector<SampledToken> out(s.samples.size());
    ASSERT_TRUE(sim.model.forward(s.batch, s.samples, out, {}).ok());
    sim.scheduler.commit(s, out);
  }
  ASSERT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(a->num_preemptions, 0);
}

// A random workload of 1,000 requests arriving over time, through a cache
// small enough to force preemptions: every request finishes, first
// admissions follow arrival order exactly (FCFS), the invariants of every
// step hold (checked in Sim::step), and the outputs of a sample of requests
// equal their solo runs.
TEST(Scheduler, RandomWorkloadIsFcfsStarvationFreeAndExact) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 32, .max_num_batched_tokens = 256};
  c.num_slots = 48;
  c.num_blocks = 160;  // 2,560 tokens: far less than the offered load
  c.block_tokens = 16;
  c.max_tokens_per_slot = 1024;
  Sim sim(c);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> prompt_len(1, 600);
  std::uniform_int_distribution<int> max_tokens(1, 64);
  std::uniform_int_distribution<int> arrivals(0, 6);
  const int kRequests = 1000;
  std::map<RequestId, int> arrival_step;
  int submitted = 0;
  const int kMaxSteps = 200000;
  while ((submitted < kRequests || !sim.done()) && sim.num_steps < kMaxSteps) {
    for (int k = arrivals(rng); k > 0 && submitted < kRequests; --k, ++submitted) {
      Request* r = sim.add(prompt_len(rng), max_tokens(rng));
      arrival_step[r->id] = sim.num_steps;
    }
    sim.step();
    if (::testing::Test::HasFailure()) break;
  }
  ASSERT_TRUE(sim.done()) << "not every request finished in " << kMaxSteps << " steps";
  ASSERT_EQ(sim.admission_order.size(), static_cast<std::size_t>(kRequests));
  EXPECT_TRUE(std::is_sorted(sim.admission_order.begin(), sim.admission_order.end()));
  EXPECT_GT(sim.preemptions, 0) << "the workload was meant to force preemptions";
  // No starvation, quantified: nobody waits more than a bounded number of
  // steps past the request that arrived just before it.
  int worst_wait = 0;
  for (auto& [id, step] : sim.finish_step)
    worst_wait = std::max(worst_wait, step - arrival_step[id]);
  RecordProperty("preemptions", sim.preemptions);
  RecordProperty("steps", sim.num_steps);
  RecordProperty("worst_latency_steps", worst_wait);
  EXPECT_EQ(sim.kv.used_blocks(), 0);
  for (int i = 0; i < kRequests; i += 97) {
    const Request& r = *sim.requests[i];
    EXPECT_EQ(
        std::vector<std::int32_t>(r.token_ids.begin() + r.num_prompt_tokens, r.token_ids.end()),
        run_alone(r))
        << "request " << r.id << " (preempted " << r.num_preemptions << " times)";
  }
}

// Without preemption, each token is computed exactly once: the model sees
// prompt + generated - 1 tokens per request (the last sample is never fed).
TEST(Scheduler, WithoutPreemptionEveryTokenIsComputedExactlyOnce) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 16, .max_num_batched_tokens = 64};
  Sim sim(c);
  std::mt19937 rng(7);
  long expected = 0;
  for (int i = 0; i < 100; ++i) {
    const int p = std::uniform_int_distribution<int>(1, 300)(rng);
    const int m = std::uniform_int_distribution<int>(1, 20)(rng);
    sim.add(p, m);
    expected += p + m - 1;
  }
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(sim.preemptions, 0);
  EXPECT_EQ(sim.model.tokens_computed, expected);
}

// ---------------------------------------------------------------------------
// Prefix caching, with the FakeKvCache's own prefix cache (16-token blocks).
// ---------------------------------------------------------------------------

std::vector<std::int32_t> tokens(int n, std::int32_t first) {
  std::vector<std::int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (first + 37 * i) % kVocab;
  return t;
}

std::vector<std::int32_t> generated(const Request& r) {
  return {r.token_ids.begin() + r.num_prompt_tokens, r.token_ids.end()};
}

SimConfig caching_config() {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 64};
  c.num_slots = 8;
  c.num_blocks = 256;
  c.prefix_caching = true;
  return c;
}

// The second request shares the first's leading 70 tokens: four whole
// blocks (64 tokens) are cached, so its prefill starts at token 64 and the
// model computes only the rest, with the output of a run without caching.
TEST(SchedulerPrefix, APrefillStartsAtTheFirstUncachedToken) {
  Sim sim(caching_config());
  const std::vector<std::int32_t> a_prompt = tokens(100, 1);
  Request* a = sim.add_prompt(a_prompt, 4);
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(a->num_cached_tokens, 0);
  EXPECT_EQ(sim.hit_tokens, 0);
  EXPECT_EQ(sim.kv.cached_blocks(), 6);  // the prompt's full blocks, kept after it finished

  std::vector<std::int32_t> b_prompt(a_prompt.begin(), a_prompt.begin() + 70);
  for (std::int32_t t : tokens(30, 500)) b_prompt.push_back(t);
  const long computed_before = sim.model.tokens_computed;
  Request* b = sim.add_prompt(b_prompt, 5);
  const ScheduledStep& s = sim.scheduler.schedule(Clock::now());
  ASSERT_EQ(s.prefill_requests.size(), 1u);
  EXPECT_EQ(s.batch.prefills[0].cached_len, 64);
  EXPECT_EQ(s.batch.prefills[0].num_new, 36);
  EXPECT_EQ(s.prefix_cache_queries, 100);
  EXPECT_EQ(s.prefix_cache_hits, 64);
  EXPECT_EQ(b->num_cached_tokens, 64);
  ASSERT_TRUE(sim.kv.prepare(s.batch).ok());
  std::vector<SampledToken> out(s.samples.size());
  ASSERT_TRUE(sim.model.forward(s.batch, s.samples, out, {}).ok());
  sim.scheduler.commit(s, out);
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(sim.model.tokens_computed - computed_before, (100 - 64) + (5 - 1));
  EXPECT_EQ(generated(*b), run_alone(*b));
  EXPECT_EQ(generated(*a), run_alone(*a));
}

// A prompt entirely in the cache still computes its last block (the store
// keeps the last token uncached, so the logits are computed); one token
// longer than the cached blocks computes just that token.
TEST(SchedulerPrefix, AFullyCachedPromptStillComputesItsLastToken) {
  Sim sim(caching_config());
  const std::vector<std::int32_t> prompt = tokens(96, 3);
  Request* a = sim.add_prompt(prompt, 6);
  ASSERT_TRUE(sim.run());
  long before = sim.model.tokens_computed;
  Request* b = sim.add_prompt(prompt, 6);
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(b->num_cached_tokens, 80);
  EXPECT_EQ(sim.model.tokens_computed - before, 16 + 5);
  EXPECT_EQ(generated(*b), generated(*a));

  std::vector<std::int32_t> longer = prompt;
  longer.push_back(7);
  before = sim.model.tokens_computed;
  Request* c = sim.add_prompt(longer, 6);
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(c->num_cached_tokens, 96);
  EXPECT_EQ(sim.model.tokens_computed - before, 1 + 5);
  EXPECT_EQ(generated(*c), run_alone(*c));
}

// Requests share cached blocks only under equal salts.
TEST(SchedulerPrefix, SaltsIsolateTenants) {
  Sim sim(caching_config());
  const std::vector<std::int32_t> prompt = tokens(90, 11);
  Request* a = sim.add_prompt(prompt, 3, /*salt=*/1);
  ASSERT_TRUE(sim.run());
  Request* other_salt = sim.add_prompt(prompt, 3, /*salt=*/2);
  Request* no_salt = sim.add_prompt(prompt, 3, /*salt=*/0);
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(other_salt->num_cached_tokens, 0);
  EXPECT_EQ(no_salt->num_cached_tokens, 0);
  Request* same_salt = sim.add_prompt(prompt, 3, /*salt=*/1);
  Request* again_none = sim.add_prompt(prompt, 3, /*salt=*/0);
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(same_salt->num_cached_tokens, 80);
  EXPECT_EQ(again_none->num_cached_tokens, 80);  // no_salt's blocks
  for (Request* r : {other_salt, no_salt, same_salt, again_none})
    EXPECT_EQ(generated(*r), generated(*a));
}

// A block is shared as soon as the step computing it is launched: the
// second request, admitted while the first is still prefilling, gets the
// blocks of the first's earlier chunk (not those of the chunk it runs with).
TEST(SchedulerPrefix, ARunningPromptsComputedBlocksAreSharedAtOnce) {
  SimConfig c = caching_config();
  c.scheduler.max_num_batched_tokens = 128;
  Sim sim(c);
  const std::vector<std::int32_t> prompt = tokens(150, 5);
  Request* a = sim.add_prompt(prompt, 8);
  sim.step();  // a: tokens [0, 128)
  EXPECT_EQ(a->num_computed, 128);
  std::vector<std::int32_t> b_prompt = prompt;
  for (std::int32_t t : tokens(50, 900)) b_prompt.push_back(t);
  Request* b = sim.add_prompt(b_prompt, 8);
  sim.step();  // a: [128, 150) and its first token; b admitted with what a computed
  EXPECT_EQ(b->num_cached_tokens, 128);
  // a's 10 blocks and b's 13, of which 8 are a's: each counted once.
  EXPECT_EQ(sim.kv.used_blocks(), 10 + 13 - 8);
  ASSERT_TRUE(sim.run());
  EXPECT_EQ(generated(*a), run_alone(*a));
  EXPECT_EQ(generated(*b), run_alone(*b));
}

// A random workload of requests that share a few system prompts (or repeat
// earlier prompts outright), under two salts, through a cache small enough
// to preempt and to evict cached blocks: every invariant of the cache holds
// after every step (FakeKvCache::check in Sim::step), prefills start past
// their hits, and the outputs equal those of runs without caching.
TEST(SchedulerPrefix, RandomSharedPrefixWorkloadMatchesRunsWithoutCaching) {
  SimConfig c;
  c.scheduler = {.max_num_seqs = 16, .max_num_batched_tokens = 128};
  c.num_slots = 24;
  c.num_blocks = 72;  // 1,152 tokens
  c.max_tokens_per_slot = 512;
  c.prefix_caching = true;
  Sim sim(c);
  std::mt19937 rng(2024);
  std::vector<std::vector<std::int32_t>> systems;
  for (int i = 0; i < 4; ++i)
    systems.push_back(tokens(16 + static_cast<int>(rng() % 180), 1 + 100 * i));
  std::vector<std::vector<std::int32_t>> prompts;
  const int kRequests = 300;
  int submitted = 0;
  while ((submitted < kRequests || !sim.done()) && sim.num_steps < 100000) {
    for (int k = static_cast<int>(rng() % 4); k > 0 && submitted < kRequests; --k, ++submitted) {
      std::vector<std::int32_t> p;
      if (!prompts.empty() && rng() % 5 == 0) {
        p = prompts[rng() % prompts.size()];  // a repeated prompt
      } else {
        p = systems[rng() % systems.size()];
        const int unique = static_cast<int>(rng() % 100);
        for (int t = 0; t < unique; ++t) p.push_back(static_cast<std::int32_t>(rng() % kVocab));
      }
      prompts.push_back(p);
      sim.add_prompt(p, 1 + static_cast<int>(rng() % 40), /*salt=*/rng() % 2);
    }
    sim.step();
    if (::testing::Test::HasFailure()) break;
  }
  ASSERT_TRUE(sim.done());
  EXPECT_GT(sim.preemptions, 0) << "the workload was meant to preempt";
  EXPECT_GT(sim.kv.num_evictions, 0) << "the workload was meant to evict cached blocks";
  EXPECT_GT(sim.hit_tokens, sim.query_tokens / 5) << "the workload was meant to share";
  EXPECT_EQ(sim.hit_tokens, sim.kv.hit_tokens);
  EXPECT_EQ(sim.kv.used_blocks(), 0);
  EXPECT_EQ(sim.kv.slots_in_use(), 0);
  for (int i = 0; i < kRequests; i += 7) {
    const Request& r = *sim.requests[i];
    EXPECT_EQ(generated(r), run_alone(r))
        << "request " << r.id << " (cached " << r.num_cached_tokens << ", preempted "
        << r.num_preemptions << " times)";
  }
}

}  // namespace
}  // namespace vpod::engine
