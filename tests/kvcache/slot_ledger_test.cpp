// The vAttention cache's pure bookkeeping (SlotLedger) and admission's
// promises (PromiseLedger), on the CPU with no provider: long random
// sequences of acquire / grow / rollback / release / reclaim checked after
// every operation against a simple model (a LIFO stack of free pages and a
// page list per slot and region):
//   - pages are conserved (free + mapped + in flight == total) and no page is
//     in two places (SlotLedger::check, and the model's own accounting);
//   - acquire picks the model's best fit, reclamation the model's victims,
//     growth the model's top free pages (LIFO), rollback restores the order;
//   - admission never over-promises: a slot that grows within its promise
//     always finds the pages (free, or reclaimable from idle slots).
// Seeds are printed so a failure can be replayed (VPOD_TEST_SEED).
#include "kvcache/slot_ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kvcache/promise_ledger.h"

namespace vpod::kvcache {
namespace {

// 192-byte tokens on 4 KiB pages: a token may straddle a page boundary.
PageGeometry small_geometry(int num_regions, int max_slots, int max_ctx) {
  PageGeometry g;
  g.page_bytes = 4096;
  g.region_token_bytes = 192;
  g.num_regions = num_regions;
  g.max_slots = max_slots;
  g.max_ctx = max_ctx;
  g.max_depth = static_cast<std::int64_t>(
      (static_cast<std::size_t>(max_ctx) * g.region_token_bytes + g.page_bytes - 1) / g.page_bytes);
  return g;
}

unsigned test_seed() {
  if (const char* env = std::getenv("VPOD_TEST_SEED"))
    return static_cast<unsigned>(std::stoul(env));
  return std::random_device{}();
}

TEST(SlotLedger, HandsOutPagesLastInFirstOut) {
  SlotLedger ledger(small_geometry(1, 2, 100), 5);
  EXPECT_EQ(ledger.num_pages(), 5);
  EXPECT_EQ(ledger.num_free(), 5);
  std::vector<PageId> taken(5);
  ASSERT_TRUE(ledger.take_free(taken));
  EXPECT_EQ(taken, (std::vector<PageId>{0, 1, 2, 3, 4}));
  std::vector<PageId> one(1);
  EXPECT_FALSE(ledger.take_free(one));
  const std::vector<PageId> back{3, 1};  // given back: 1 was taken last
  ledger.give_back(back);
  EXPECT_TRUE(ledger.is_free(1));
  EXPECT_FALSE(ledger.is_free(0));
  ASSERT_TRUE(ledger.take_free(one));
  EXPECT_EQ(one[0], 3u);  // last in, first out
  ASSERT_TRUE(ledger.take_free(one));
  EXPECT_EQ(one[0], 1u);
}

TEST(PageGeometry, TokensStraddlePageBoundaries) {
  const PageGeometry g = small_geometry(2, 4, 100);
  EXPECT_EQ(g.max_depth, 5);  // 19200 bytes
  EXPECT_EQ(g.pages_for_tokens(0), 0);
  EXPECT_EQ(g.pages_for_tokens(21), 1);   // 4032 bytes
  EXPECT_EQ(g.pages_for_tokens(22), 2);   // 4224 bytes
  EXPECT_EQ(g.tokens_for_pages(2), 42);   // 8192 / 192
  EXPECT_EQ(g.tokens_for_depth(5), 100);  // 106, capped at max_ctx
}

// The simple model: a LIFO stack of free pages, each slot's pages per region.
struct Model {
  struct Slot {
    bool active = false;
    std::vector<std::vector<PageId>> regions;
    std::uint64_t release_order = 0;
    std::int64_t depth() const { return static_cast<std::int64_t>(regions[0].size()); }
  };
  std::vector<PageId> free;  // back = next handed out
  std::vector<Slot> slots;
  std::uint64_t releases = 0;

  Model(int num_slots, int num_regions, std::int64_t num_pages) : slots(num_slots) {
    for (Slot& s : slots) s.regions.resize(num_regions);
    for (std::int64_t i = num_pages; i > 0; --i) free.push_back(static_cast<PageId>(i - 1));
  }
  int best_fit(std::int64_t need) const {
    int best = -1;
    for (int s = 0; s < static_cast<int>(slots.size()); ++s) {
      if (slots[s].active) continue;
      if (best < 0) {
        best = s;
        continue;
      }
      const auto key = [&](int i) {
        const std::int64_t surplus = slots[i].depth() - need;
        return std::make_pair(surplus >= 0 ? 0 : 1, surplus >= 0 ? surplus : -surplus);
      };
      if (key(s) < key(best) ||
          (key(s) == key(best) && slots[s].release_order > slots[best].release_order)) {
        best = s;
      }
    }
    return best;
  }
  std::int64_t idle_pages(int exclude) const {
    std::int64_t pages = 0;
    for (int s = 0; s < static_cast<int>(slots.size()); ++s) {
      if (!slots[s].active && s != exclude) pages += slots[s].depth() * slots[s].regions.size();
    }
    return pages;
  }
  // Unmaps `count` depth steps off the slot's tail, last page first.
  void return_tail(int slot, std::int64_t count) {
    for (auto& region : slots[slot].regions) {
      for (std::int64_t i = 0; i < count; ++i) {
        free.push_back(region.back());
        region.pop_back();
      }
    }
  }
};

// Checks the ledger against the model: depths, activity, every page, and
// which pages are free.
void expect_matches(const SlotLedger& ledger, const Model& model) {
  ASSERT_TRUE(ledger.check().ok()) << ledger.check().to_string();
  ASSERT_EQ(ledger.num_free(), static_cast<std::int64_t>(model.free.size()));
  for (const PageId id : model.free) ASSERT_TRUE(ledger.is_free(id)) << "page " << id;
  std::int64_t mapped = 0;
  for (int s = 0; s < static_cast<int>(model.slots.size()); ++s) {
    const Model::Slot& m = model.slots[s];
    ASSERT_EQ(ledger.slot(s).active, m.active) << "slot " << s;
    ASSERT_EQ(ledger.slot(s).depth, m.depth()) << "slot " << s;
    for (int r = 0; r < static_cast<int>(m.regions.size()); ++r) {
      for (std::int64_t i = 0; i < m.depth(); ++i) {
        ASSERT_EQ(ledger.page(s, r, i), m.regions[r][i]) << "slot " << s << " region " << r;
        ++mapped;
      }
    }
  }
  ASSERT_EQ(mapped + ledger.num_free(), ledger.num_pages()) << "pages not conserved";
}

class SlotLedgerProperty : public ::testing::TestWithParam<int> {};

TEST_P(SlotLedgerProperty, RandomOperationsMatchTheModel) {
  const int num_regions = GetParam();
  const unsigned seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (VPOD_TEST_SEED to replay)");
  std::mt19937 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  const PageGeometry g = small_geometry(num_regions, 6, 100);
  // At least 4 depth steps (so growth must reclaim from time to time), at
  // most 3 full slots of 6; not always a multiple of the region count.
  const std::int64_t num_pages = uniform(4 * num_regions, 3 * g.max_depth * num_regions);
  SlotLedger ledger(g, num_pages);
  Model model(g.max_slots, num_regions, num_pages);
  std::vector<Victim> victims;
  std::vector<PageId> ids(static_cast<std::size_t>(g.max_depth) * num_regions);
  int grows = 0, reclaims = 0, rollbacks = 0;

  for (int op = 0; op < 5000; ++op) {
    const int kind = static_cast<int>(uniform(0, 9));
    const int s = static_cast<int>(uniform(0, g.max_slots - 1));
    Model::Slot& m = model.slots[s];
    if (kind <= 1) {  // acquire
      const std::int64_t need = uniform(0, g.max_depth);
      const int expected = model.best_fit(need);
      const std::uint64_t generation = expected >= 0 ? ledger.slot(expected).generation : 0;
      ASSERT_EQ(ledger.acquire(need), expected) << "op " << op;
      if (expected >= 0) {
        model.slots[expected].active = true;
        ASSERT_EQ(ledger.slot(expected).generation, generation + 1);
      }
    } else if (kind <= 4 && m.active) {  // grow, reclaiming if it must
      const std::int64_t target = uniform(m.depth(), g.max_depth);
      const std::int64_t count = target - m.depth();
      const std::int64_t needed = count * num_regions;
      const std::int64_t free = ledger.num_free();
      if (free < needed) {
        if (free + model.idle_pages(s) < needed) continue;  // the store says resource_exhausted
        const std::int64_t steps = (needed - free + num_regions - 1) / num_regions;
        ASSERT_EQ(ledger.plan_victims(steps, s, victims), steps);
        for (const Victim& v : victims) {
          ASSERT_NE(v.slot, s);
          ASSERT_FALSE(model.slots[v.slot].active);
          ASSERT_EQ(model.slots[v.slot].depth(), v.new_depth + v.count);
          ledger.return_tail(v);
          model.return_tail(v.slot, v.count);
        }
        ++reclaims;
      }
      const std::span<PageId> taken(ids.data(), static_cast<std::size_t>(needed));
      ASSERT_TRUE(ledger.take_free(taken));
      ASSERT_EQ(ledger.in_flight_pages(), needed);
      ASSERT_TRUE(ledger.check(/*allow_in_flight=*/true).ok());
      for (std::int64_t i = 0; i < needed; ++i) {
        ASSERT_EQ(taken[i], model.free.back()) << "not last in, first out";
        model.free.pop_back();
      }
      if (uniform(0, 3) == 0) {  // the mapping failed or the owner changed: roll back
        ledger.give_back(taken);
        for (std::int64_t i = needed; i > 0; --i) model.free.push_back(taken[i - 1]);
        ++rollbacks;
      } else {
        ledger.commit(s, m.depth(), count, taken, count, false);
        for (int r = 0; r < num_regions; ++r) {
          for (std::int64_t i = 0; i < count; ++i) m.regions[r].push_back(taken[r * count + i]);
        }
        ledger.note_used(s, g.tokens_for_depth(target));
        ++grows;
      }
    } else if (kind <= 6 && m.active) {  // release, deferred or eager
      const bool eager = uniform(0, 3) == 0;
      const std::int64_t depth = m.depth();
      const Victim v = ledger.release(s, eager);
      m.active = false;
      m.release_order = ++model.releases;
      ASSERT_EQ(v.count, eager ? depth : 0);
      if (v.count > 0) {
        ASSERT_EQ(ledger.in_flight_pages(), depth * num_regions);
        ledger.return_tail(v);
        model.return_tail(s, v.count);
      }
    } else if (kind <= 8) {  // reclaim idle slots; some unmaps fail
      const std::int64_t steps = uniform(0, 2 * g.max_depth);
      const std::int64_t planned = ledger.plan_victims(steps, -1, victims);
      ASSERT_EQ(planned, std::min(steps, model.idle_pages(-1) / num_regions));
      // Victims come largest first, ties to the longest released.
      for (std::size_t i = 1; i < victims.size(); ++i) {
        ASSERT_GE(victims[i - 1].new_depth + victims[i - 1].count,
                  victims[i].new_depth + victims[i].count);
      }
      const std::size_t failed_from = static_cast<std::size_t>(uniform(0, victims.size()));
      for (std::size_t i = 0; i < victims.size(); ++i) {
        if (i < failed_from) {
          ledger.return_tail(victims[i]);
          model.return_tail(victims[i].slot, victims[i].count);
        } else {
          ledger.restore(victims[i]);  // a fence wait failed: the slot keeps its pages
        }
      }
    } else {  // capacity queries agree with the model
      std::int64_t idle = 0;
      for (const Model::Slot& q : model.slots) idle += q.active ? 0 : q.depth() * num_regions;
      const std::int64_t available = static_cast<std::int64_t>(model.free.size()) + idle;
      ASSERT_EQ(ledger.free_tokens(), g.tokens_for_pages(available / num_regions));
      ASSERT_EQ(ledger.idle_pages(-1), idle);
      ASSERT_EQ(ledger.backed_tokens(s), g.tokens_for_depth(m.depth()));
    }
    expect_matches(ledger, model);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(grows, 100) << num_pages << " pages";
  EXPECT_GT(reclaims, 0) << num_pages << " pages, " << grows << " grows";
  EXPECT_GT(rollbacks, 0) << num_pages << " pages";
}

INSTANTIATE_TEST_SUITE_P(Regions, SlotLedgerProperty, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Regions";
                         });

// Admission as the vAttention store does it (KvCache::can_allocate/allocate,
// with deferred reclamation and lookahead), on the ledgers alone: random
// admissions, growth within promises and frees. Whatever happens, a slot
// growing to its promised tokens (+ lookahead) finds the pages: free, or
// reclaimable from idle slots. That is "capacity is never over-promised".
TEST(PromiseLedger, AdmissionNeverOverPromises) {
  const unsigned seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (VPOD_TEST_SEED to replay)");
  std::mt19937 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  const PageGeometry g = small_geometry(2, 8, 100);
  const std::int64_t num_pages = 2 * 14;
  const std::int64_t lookahead = uniform(0, 30);
  SlotLedger ledger(g, num_pages);
  PromiseLedger promises(g.max_slots, num_pages / g.num_regions);
  std::vector<Victim> victims;
  std::vector<PageId> ids(static_cast<std::size_t>(g.max_depth) * g.num_regions);
  const auto promise_units = [&](std::int64_t tokens) {
    const std::int64_t mapped = std::min<std::int64_t>(g.max_ctx, tokens + lookahead);
    return promises.promise_units(g.pages_for_tokens(tokens), g.pages_for_tokens(mapped));
  };
  // Maps the slot the way the store does: its tokens (required growth, which
  // may reclaim idle slots' pages and must never run out), then its
  // lookahead from free pages only (best effort).
  const auto grow_to = [&](int s, std::int64_t target, bool reclaim) {
    target = std::min(g.max_depth, target);
    const std::int64_t count = target - ledger.slot(s).depth;
    if (count <= 0) return;
    const std::int64_t needed = count * g.num_regions;
    if (ledger.num_free() < needed) {
      if (!reclaim) return;
      ASSERT_GE(ledger.num_free() + ledger.idle_pages(s), needed) << "over-promised";
      const std::int64_t steps = (needed - ledger.num_free() + g.num_regions - 1) / g.num_regions;
      ASSERT_EQ(ledger.plan_victims(steps, s, victims), steps);
      for (const Victim& v : victims) ledger.return_tail(v);
    }
    const std::span<PageId> taken(ids.data(), static_cast<std::size_t>(needed));
    ASSERT_TRUE(ledger.take_free(taken));
    ledger.commit(s, ledger.slot(s).depth, count, taken, count, false);
  };
  const auto back = [&](int s, std::int64_t tokens) {
    grow_to(s, g.pages_for_tokens(tokens), true);
    const std::int64_t mapped = std::min<std::int64_t>(g.max_ctx, tokens + lookahead);
    grow_to(s, g.pages_for_tokens(mapped), false);
  };
  struct Seq {
    int slot;
    std::int64_t tokens;
  };
  std::vector<Seq> running;
  int admitted = 0, refused = 0;
  for (int op = 0; op < 5000; ++op) {
    const int kind = static_cast<int>(uniform(0, 5));
    if (kind <= 1) {
      const std::int64_t n = uniform(1, g.max_ctx);
      std::int64_t need = promise_units(n);
      std::int64_t best_fit = -1;
      for (int s = 0; s < g.max_slots; ++s) {
        const std::int64_t held = ledger.slot(s).depth;
        if (!ledger.slot(s).active && held >= g.pages_for_tokens(n) &&
            (best_fit < 0 || held < best_fit))
          best_fit = held;
      }
      need = std::max(need, best_fit);
      if (ledger.num_free_slots() == 0 || !promises.fits(need)) {
        ++refused;
        continue;
      }
      const int s = ledger.acquire(g.pages_for_tokens(n));
      ASSERT_GE(s, 0);
      promises.open(s, std::max(promise_units(n), ledger.slot(s).depth), n);
      running.push_back({s, n});
      back(s, n);
      ++admitted;
    } else if (kind <= 3 && !running.empty()) {
      Seq& q = running[uniform(0, static_cast<std::int64_t>(running.size()) - 1)];
      const std::int64_t n = std::min<std::int64_t>(g.max_ctx, q.tokens + uniform(1, 20));
      if (promises.raise(q.slot, promise_units(n), n)) {
        q.tokens = n;
        back(q.slot, n);
      }
    } else if (!running.empty()) {
      const std::size_t i = uniform(0, static_cast<std::int64_t>(running.size()) - 1);
      ledger.release(running[i].slot, false);
      promises.close(running[i].slot);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_LE(promises.used_units(), promises.total_units());
    std::int64_t active_depth = 0;
    for (const Seq& q : running) active_depth += ledger.slot(q.slot).depth;
    ASSERT_LE(active_depth, promises.used_units()) << "op " << op;
    ASSERT_TRUE(ledger.check().ok());
  }
  EXPECT_GT(admitted, 100);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace vpod::kvcache
