// Randomized property tests of the vAttention KV cache on the host provider:
// long random sequences of acquire / ensure / prepare / wait / release /
// reclaim (with injected map failures), checked against a model after every
// operation; and a step loop where prepare() races the consumer while a third
// thread inspects the cache. Invariants:
//   - no page is mapped twice (cache bookkeeping and the provider's ledger);
//   - pool pages are conserved (free + mapped == total, nothing in flight);
//   - data written through a slot's views survives growth, reclamation of
//     other slots and the mapper thread's activity;
//   - a released-then-reacquired slot reuses its pages (and their contents).
// Seeds are printed so a failure can be replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "kv_test_util.h"

namespace vpod::kvcache {
namespace {

using testing::count_mismatches;
using testing::make_host_provider;
using testing::small_config;
using testing::write_tokens;

struct SeqModel {
  bool active = false;
  std::uint32_t tag = 0;
  std::int64_t written = 0;  // tokens [0, written) hold pattern(tag)
  // What the slot held when last released.
  bool has_release = false;
  std::vector<PageId> pages_at_release;
  std::int64_t depth_at_release = 0;
  std::uint32_t tag_at_release = 0;
  std::int64_t written_at_release = 0;
  // A hint (expect_acquire) was live at some time while the slot was free:
  // pre-mapping may have appended fresh pages after reclamation trimmed its
  // tail. A hint stays live until the mapper finishes it or settle_prewarm(),
  // so one given before the release counts too.
  bool hinted_since_release = false;
  std::int64_t unmapped_at_release = 0;  // KvStats::pages_unmapped_total then
};

// A fresh seed per run, or VPOD_TEST_SEED to replay one.
unsigned test_seed() {
  if (const char* env = std::getenv("VPOD_TEST_SEED"))
    return static_cast<unsigned>(std::stoul(env));
  return std::random_device{}();
}

bool is_expected_failure(const Status& status) {
  return status.code() == StatusCode::resource_exhausted ||
         status.message().find("injected fault") != std::string::npos;
}

struct PropertyCase {
  KvLayout layout;
  GrowthMode growth;
};

class KvCacheProperty : public ::testing::TestWithParam<PropertyCase> {};

TEST_P(KvCacheProperty, RandomOperationSequencesKeepEveryInvariant) {
  const PropertyCase param = GetParam();
  const unsigned seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };

  auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
  KvCacheConfig config = small_config(param.layout, param.growth, 96);
  config.lookahead_tokens = uniform(0, 40);
  auto created = KvCache::create(config, provider);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  KvCache& cache = **created;
  const int regions = cache.num_regions();

  std::vector<SeqModel> model(config.max_slots);
  std::uint32_t next_tag = 1;
  struct Pending {
    PrepareTicket ticket;
    std::vector<std::pair<int, std::uint32_t>> slots;  // slot, tag at prepare
    std::vector<std::int64_t> tokens;
  };
  std::vector<Pending> pending;
  int reuses = 0, reclaims = 0, failures = 0, hints = 0;
  bool hint_live = false;  // an expect_acquire() not settled since (conservative)

  auto active_slots = [&] {
    std::vector<int> out;
    for (int s = 0; s < config.max_slots; ++s) {
      if (model[s].active) out.push_back(s);
    }
    return out;
  };
  auto verify_slot = [&](int s) {
    ASSERT_GE(cache.backed_tokens(s), model[s].written) << "slot " << s;
    ASSERT_EQ(count_mismatches(cache, s, model[s].tag, 0, model[s].written), 0) << "slot " << s;
  };
  auto finish_wait = [&](const Pending& p) {
    const Status status = cache.wait(p.ticket);
    if (!status.ok()) {
      ASSERT_TRUE(is_expected_failure(status)) << status.to_string();
      ++failures;
      return;
    }
    for (std::size_t i = 0; i < p.slots.size(); ++i) {
      const auto [s, tag] = p.slots[i];
      if (!model[s].active || model[s].tag != tag) continue;  // released since
      ASSERT_GE(cache.backed_tokens(s), p.tokens[i])
          << "slot " << s << " ticket " << p.ticket << " depth " << cache.slot_depth(s);
      if (p.tokens[i] > model[s].written) {
        write_tokens(cache, s, tag, model[s].written, p.tokens[i]);
        model[s].written = p.tokens[i];
      }
    }
  };

  constexpr int kOps = 2500;
  for (int op_index = 0; op_index < kOps; ++op_index) {
    const std::int64_t op = uniform(0, 99);
    const std::vector<int> active = active_slots();
    if (op < 14) {
      const std::int64_t expected = uniform(0, config.max_ctx);
      auto slot = cache.acquire(expected);
      if (!slot.ok()) {
        ASSERT_EQ(slot.status().code(), StatusCode::resource_exhausted);
        ASSERT_EQ(active.size(), static_cast<std::size_t>(config.max_slots));
        continue;
      }
      const int s = *slot;
      ASSERT_FALSE(model[s].active);
      SeqModel& m = model[s];
      if (m.has_release) {
        // Deferred reclamation: whatever of the slot's pages was not reclaimed
        // in between is the same physical pages, with the same contents.
        // Pre-mapping only appends at the tail: the kept prefix is the
        // release-time pages up to the first that differs.
        const std::vector<PageId> now = cache.slot_pages(s);
        const std::int64_t depth = static_cast<std::int64_t>(now.size()) / regions;
        const std::int64_t common = std::min(depth, m.depth_at_release);
        std::int64_t retained = common;
        for (int r = 0; r < regions; ++r) {
          for (std::int64_t i = 0; i < retained; ++i) {
            if (now[r * depth + i] != m.pages_at_release[r * m.depth_at_release + i]) {
              ASSERT_TRUE(m.hinted_since_release) << "slot " << s << " page " << i;
              retained = i;
            }
          }
        }
        // A hinted slot whose tail was unmapped meanwhile may have been
        // pre-mapped again with the very pages it lost (the pool hands them
        // back): equal page ids then prove nothing about the contents.
        const bool refilled =
            m.hinted_since_release && cache.stats().pages_unmapped_total != m.unmapped_at_release;
        const std::int64_t kept = refilled ? 0
                                           : std::min({m.written_at_release, cache.backed_tokens(s),
                                                       cache.tokens_for_pages(retained)});
        ASSERT_EQ(count_mismatches(cache, s, m.tag_at_release, 0, kept), 0);
        reuses += retained > 0;
      }
      m.active = true;
      m.tag = next_tag++;
      m.written = 0;
    } else if (op < 34 && !active.empty()) {
      const int s = active[uniform(0, static_cast<std::int64_t>(active.size()) - 1)];
      const std::int64_t tokens = uniform(model[s].written, config.max_ctx);
      const Status status = cache.ensure(s, tokens);
      if (status.ok()) {
        ASSERT_GE(cache.backed_tokens(s), tokens);
        write_tokens(cache, s, model[s].tag, model[s].written, tokens);
        model[s].written = tokens;
      } else {
        ASSERT_TRUE(is_expected_failure(status)) << status.to_string();
        ++failures;
      }
      verify_slot(s);
    } else if (op < 58 && !active.empty()) {
      Pending p;
      std::vector<SlotTokens> next;
      for (const int s : active) {
        if (uniform(0, 2) == 0) continue;
        const std::int64_t tokens =
            std::min<std::int64_t>(config.max_ctx, model[s].written + uniform(1, 40));
        next.push_back({s, tokens});
        p.slots.push_back({s, model[s].tag});
        p.tokens.push_back(tokens);
      }
      auto ticket = cache.prepare(next);
      if (!ticket.ok()) {
        ASSERT_TRUE(is_expected_failure(ticket.status())) << ticket.status().to_string();
        ++failures;
        continue;
      }
      p.ticket = *ticket;
      if (uniform(0, 1) == 0) {
        finish_wait(p);
      } else {
        pending.push_back(std::move(p));  // consumer keeps working meanwhile
      }
    } else if (op < 68 && !pending.empty()) {
      finish_wait(pending.front());
      pending.erase(pending.begin());
    } else if (op < 80 && !active.empty()) {
      const int s = active[uniform(0, static_cast<std::int64_t>(active.size()) - 1)];
      verify_slot(s);
      SeqModel& m = model[s];
      ASSERT_TRUE(cache.release(s, nullptr).ok());
      m.active = false;
      m.has_release = true;
      m.pages_at_release = cache.slot_pages(s);
      m.depth_at_release = static_cast<std::int64_t>(m.pages_at_release.size()) / regions;
      m.tag_at_release = m.tag;
      m.written_at_release = m.written;
      m.hinted_since_release = hint_live;
      m.unmapped_at_release = cache.stats().pages_unmapped_total;
    } else if (op < 85) {
      auto reclaimed = cache.reclaim_idle(uniform(0, 20));
      ASSERT_TRUE(reclaimed.ok()) << reclaimed.status().to_string();
      reclaims += *reclaimed > 0;
    } else if (op < 88) {
      provider->fail_map_call(uniform(1, 4));
    } else if (op < 92) {
      // Eager allocation for a (maybe never coming) next request.
      const std::int64_t expected = uniform(0, config.max_ctx);
      cache.expect_acquire(expected, uniform(0, expected));
      for (SeqModel& m : model) m.hinted_since_release |= !m.active;
      hint_live = true;
      ++hints;
    } else if (op < 94) {
      cache.settle_prewarm();
      hint_live = false;
    } else if (!active.empty()) {
      verify_slot(active[uniform(0, static_cast<std::int64_t>(active.size()) - 1)]);
    }
    const Status invariants = cache.check_invariants();
    ASSERT_TRUE(invariants.ok()) << "op " << op_index << ": " << invariants.to_string();
    const FaultInjectingProvider::Ledger ledger = provider->ledger();
    ASSERT_EQ(ledger.double_maps, 0);
    ASSERT_EQ(ledger.shared_maps, 0);  // no prefix caching: no page shared
    ASSERT_EQ(ledger.bad_unmaps, 0);
  }
  for (const Pending& p : pending) finish_wait(p);
  provider->fail_map_call(0);
  cache.drain();
  ASSERT_TRUE(cache.check_invariants().ok());
  EXPECT_EQ(provider->ledger().pages_mapped_now, cache.stats().pages_mapped);
  for (int s = 0; s < config.max_slots; ++s) {
    if (model[s].active) verify_slot(s);
  }
  // The run exercised what it claims to.
  EXPECT_GT(reuses, 0);
  EXPECT_GT(reclaims + cache.stats().pages_reclaimed, 0);
  EXPECT_GT(failures, 0);
  EXPECT_GT(provider->ledger().injected_failures, 0);
  EXPECT_GT(hints, 0);
  if (param.growth == GrowthMode::background) {
    EXPECT_GT(cache.prewarm_stats().pages, 0);
  } else {
    EXPECT_EQ(cache.prewarm_stats().pages, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    LayoutsAndModes, KvCacheProperty,
    ::testing::Values(PropertyCase{KvLayout::all_layers, GrowthMode::background},
                      PropertyCase{KvLayout::per_layer, GrowthMode::background},
                      PropertyCase{KvLayout::all_layers, GrowthMode::synchronous},
                      PropertyCase{KvLayout::per_layer, GrowthMode::synchronous}),
    [](const ::testing::TestParamInfo<PropertyCase>& info) {
      return std::string(info.param.layout == KvLayout::all_layers ? "AllLayers" : "PerLayer") +
             (info.param.growth == GrowthMode::background ? "Background" : "Synchronous");
    });

// A decode loop: each step hands the next step's growth to the mapper, then
// (while the mapper maps) reads and checks what the current step may read,
// then waits, then appends one token per sequence. Finished sequences release
// their slots and new ones start with a prompt; when memory runs out the
// longest sequence is preempted, as an engine would. A second thread inspects
// the cache (stats, capacity, invariants) throughout.
TEST(KvCacheConcurrency, PrepareRacesTheConsumer) {
  std::int64_t total_reclaimed = 0;
  for (const KvLayout layout : {KvLayout::all_layers, KvLayout::per_layer}) {
    const unsigned seed = test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " layout " + std::string(kv_layout_name(layout)));
    std::mt19937 rng(seed);
    auto uniform = [&](std::int64_t lo, std::int64_t hi) {
      return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    auto provider = std::make_shared<FaultInjectingProvider>(make_host_provider(4096));
    // 4 running sequences over 8 slots: idle slots keep pages (deferred
    // reclamation), and a tight pool makes the mapper reclaim their tails
    // while the consumer reads the running ones.
    KvCacheConfig config = small_config(layout, GrowthMode::background, 70);
    config.lookahead_tokens = 8;
    auto created = KvCache::create(config, provider);
    ASSERT_TRUE(created.ok());
    KvCache& cache = **created;

    std::atomic<bool> done{false};
    std::atomic<int> observer_errors{0};
    std::atomic<std::int64_t> observations{0};
    std::thread observer([&] {
      while (!done.load()) {
        const KvStats stats = cache.stats();
        if (stats.pages_free + stats.pages_mapped > stats.pages_total) ++observer_errors;
        // Each call is a consistent snapshot on its own (two calls are not:
        // pages may move between them).
        for (int s = 0; s < config.max_slots; ++s) {
          if (cache.capacity_tokens(s) > config.max_ctx) ++observer_errors;
          if (cache.backed_tokens(s) > config.max_ctx) ++observer_errors;
        }
        if (cache.free_tokens() > cache.capacity_tokens()) ++observer_errors;
        if (observations % 8 == 0 && !cache.check_invariants().ok()) ++observer_errors;
        ++observations;
        std::this_thread::yield();
      }
    });

    struct Seq {
      int slot;
      std::uint32_t tag;
      std::int64_t len;
      std::int64_t target;
    };
    std::vector<Seq> seqs;
    std::uint32_t next_tag = 1;
    int finished = 0, preempted = 0;
    // An idle slot only shrinks (reclamation), except that pre-mapping may
    // grow it up to a hinted request's pages.
    std::vector<std::int64_t> held_at_release(config.max_slots, 0);
    std::int64_t max_hint_pages = 0;
    auto release = [&](int slot) {
      ASSERT_TRUE(cache.release(slot, nullptr).ok());
      held_at_release[slot] = cache.slot_depth(slot);
    };
    auto preempt_longest = [&] {
      auto longest = std::max_element(seqs.begin(), seqs.end(),
                                      [](const Seq& a, const Seq& b) { return a.len < b.len; });
      release(longest->slot);
      seqs.erase(longest);
      ++preempted;
    };
    constexpr int kSteps = 4000;
    std::int64_t next_prompt = uniform(1, 120);
    for (int step = 0; step < kSteps; ++step) {
      // Admission: now and then one new sequence, up to 4 running, so idle
      // slots sit on pages while the running ones grow. Its first pages may
      // have been mapped during the last step (expect_acquire below); the
      // engine stops that before it reads free slots and acquires.
      if (seqs.size() < 4 && (seqs.empty() || uniform(0, 9) == 0)) {
        const std::int64_t prompt = next_prompt;
        next_prompt = uniform(1, 120);
        cache.settle_prewarm();
        auto slot = cache.acquire(prompt);
        ASSERT_TRUE(slot.ok());
        ASSERT_LE(cache.slot_depth(*slot), std::max(max_hint_pages, held_at_release[*slot]))
            << "pre-mapping went past the requests it was for";
        const Status status = cache.ensure(*slot, prompt);
        if (!status.ok()) {
          ASSERT_EQ(status.code(), StatusCode::resource_exhausted) << status.to_string();
          release(*slot);
        } else {
          Seq seq{*slot, next_tag++, prompt,
                  std::min<std::int64_t>(config.max_ctx, prompt + uniform(1, 200))};
          write_tokens(cache, seq.slot, seq.tag, 0, prompt);
          seqs.push_back(seq);
        }
      }
      if (seqs.empty()) continue;
      std::vector<SlotTokens> next;
      for (const Seq& seq : seqs) next.push_back({seq.slot, seq.len + 1});
      auto ticket = cache.prepare(next);
      ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
      cache.expect_acquire(next_prompt, next_prompt);
      max_hint_pages = std::max(max_hint_pages, cache.pages_for_tokens(next_prompt));
      // "Kernels" of this step read what is backed while the mapper maps.
      for (const Seq& seq : seqs) {
        ASSERT_EQ(count_mismatches(cache, seq.slot, seq.tag, seq.len - 1, seq.len), 0);
        const std::int64_t t = uniform(0, seq.len - 1);
        ASSERT_EQ(count_mismatches(cache, seq.slot, seq.tag, t, t + 1), 0);
      }
      const Status waited = cache.wait(*ticket);
      if (!waited.ok()) {
        ASSERT_EQ(waited.code(), StatusCode::resource_exhausted) << waited.to_string();
        preempt_longest();
        continue;
      }
      for (auto it = seqs.begin(); it != seqs.end();) {
        ASSERT_GE(cache.backed_tokens(it->slot), it->len + 1);
        write_tokens(cache, it->slot, it->tag, it->len, it->len + 1);
        ++it->len;
        if (it->len >= it->target) {
          ASSERT_EQ(count_mismatches(cache, it->slot, it->tag, 0, it->len), 0);
          release(it->slot);
          it = seqs.erase(it);
          ++finished;
        } else {
          ++it;
        }
      }
    }
    done = true;
    observer.join();
    for (const Seq& seq : seqs) {
      ASSERT_EQ(count_mismatches(cache, seq.slot, seq.tag, 0, seq.len), 0);
    }
    cache.drain();
    EXPECT_EQ(observer_errors.load(), 0);
    EXPECT_GT(observations.load(), 0);
    EXPECT_GT(finished, 10);
    ASSERT_TRUE(cache.check_invariants().ok());
    EXPECT_EQ(provider->ledger().double_maps, 0);
    EXPECT_EQ(provider->ledger().shared_maps, 0);  // no prefix caching: no page shared
    EXPECT_EQ(provider->ledger().pages_mapped_now, cache.stats().pages_mapped);
    const KvStats stats = cache.stats();
    EXPECT_GT(stats.mapper_pages, 0);
    total_reclaimed += stats.pages_reclaimed;
    std::printf(
        "[ %s ] finished %d, preempted %d, mapper pages %lld, reclaimed %lld, "
        "pre-mapped pages %lld (hits %lld), observations %lld\n",
        std::string(kv_layout_name(layout)).c_str(), finished, preempted,
        static_cast<long long>(stats.mapper_pages), static_cast<long long>(stats.pages_reclaimed),
        static_cast<long long>(cache.prewarm_stats().pages),
        static_cast<long long>(cache.prewarm_stats().hits),
        static_cast<long long>(observations.load()));
  }
  EXPECT_GT(total_reclaimed, 0);
}

}  // namespace
}  // namespace vpod::kvcache
