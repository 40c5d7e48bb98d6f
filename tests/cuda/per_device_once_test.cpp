#include "cuda/per_device_once.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace vpod::cuda {
namespace {

// Each device is prepared on its first call and never again; devices do not
// share the flag (the bug it replaces: a process-wide static prepared only the
// first device a tensor-parallel rank touched).
TEST(PerDeviceOnce, RunsOncePerDevice) {
  PerDeviceOnce once;
  std::vector<int> runs(4, 0);
  for (int round = 0; round < 3; ++round) {
    for (int device : {0, 2, 3}) {
      EXPECT_TRUE(once.run(device,
                           [&] {
                             ++runs[device];
                             return Status();
                           })
                      .ok());
    }
  }
  EXPECT_EQ(runs, (std::vector<int>{1, 0, 1, 1}));
  EXPECT_TRUE(once.done(0));
  EXPECT_FALSE(once.done(1));
  EXPECT_TRUE(once.done(3));
}

// A failed setup is returned and retried on the next call.
TEST(PerDeviceOnce, RetriesAfterAFailure) {
  PerDeviceOnce once;
  int runs = 0;
  const Status first = once.run(1, [&] {
    ++runs;
    return internal_error("no attribute");
  });
  EXPECT_FALSE(first.ok());
  EXPECT_EQ(first.message(), "no attribute");
  EXPECT_FALSE(once.done(1));
  EXPECT_TRUE(once.run(1,
                       [&] {
                         ++runs;
                         return Status();
                       })
                  .ok());
  EXPECT_TRUE(once.run(1,
                       [&] {
                         ++runs;
                         return Status();
                       })
                  .ok());
  EXPECT_EQ(runs, 2);
}

// Ordinals past the cache (and negative ones) run their setup every time.
TEST(PerDeviceOnce, UncachedOrdinalsRunEveryTime) {
  PerDeviceOnce once;
  int runs = 0;
  for (int i = 0; i < 3; ++i) {
    (void)once.run(PerDeviceOnce::kMaxCachedDevices, [&] {
      ++runs;
      return Status();
    });
    (void)once.run(-1, [&] {
      ++runs;
      return Status();
    });
  }
  EXPECT_EQ(runs, 6);
  EXPECT_FALSE(once.done(PerDeviceOnce::kMaxCachedDevices));
}

// Rank threads, one per device, all racing on first use: each device ends up
// prepared, and after the first success no call runs the setup again.
TEST(PerDeviceOnce, ConcurrentRanksEachPrepareTheirDevice) {
  PerDeviceOnce once;
  constexpr int kDevices = 8;
  std::vector<std::atomic<int>> runs(kDevices);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4 * kDevices; ++t) {
    threads.emplace_back([&, device = t % kDevices] {
      for (int i = 0; i < 100; ++i) {
        EXPECT_TRUE(once.run(device,
                             [&] {
                               runs[device].fetch_add(1);
                               return Status();
                             })
                        .ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_TRUE(once.done(d));
    // Racing first calls may each run it (idempotent setups), at most once per
    // thread of that device.
    EXPECT_GE(runs[d].load(), 1);
    EXPECT_LE(runs[d].load(), 4);
  }
  const int before = runs[0].load();
  EXPECT_TRUE(once.run(0,
                       [&] {
                         runs[0].fetch_add(1);
                         return Status();
                       })
                  .ok());
  EXPECT_EQ(runs[0].load(), before);
}

}  // namespace
}  // namespace vpod::cuda
