// SpinPool (common/util/spin_pool.h): work runs on the caller and on the
// helpers that join, every call returns before TryHelp does, a busy pool
// or a pool thread refuses instead of deadlocking, and sleeping helpers wake.
#include "common/util/spin_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace pdserve {
namespace {

// Runs chunks [0, n) through the pool, as ForEachChunk does; returns how
// many times each chunk ran.
std::vector<int> TakeChunks(int helpers, int64_t n) {
  auto hits = std::make_unique<std::atomic<int>[]>(n);
  std::atomic<int64_t> next{0};
  const auto work = [&] {
    for (int64_t c = next.fetch_add(1); c < n; c = next.fetch_add(1)) ++hits[c];
  };
  EXPECT_TRUE(SpinPool::Get().TryHelp(helpers, work));
  std::vector<int> out(n);
  for (int64_t c = 0; c < n; ++c) out[c] = hits[c].load();
  return out;
}

TEST(SpinPoolTest, EveryChunkRunsOnceAndAllCallsReturnFirst) {
  for (int helpers : {0, 1, 3}) {
    for (int round = 0; round < 200; ++round) {
      const int64_t n = 1 + round % 37;
      ASSERT_EQ(TakeChunks(helpers, n), std::vector<int>(n, 1)) << "helpers " << helpers << " round " << round;
    }
  }
}

// One region whose caller's share blocks (up to 30 s) until a helper has
// run: only a helper that joined can release it. on_helper runs on that
// helper first. True if one did.
bool HelperJoinsWhileCallerWaits(const std::function<void()>& on_helper = [] {}) {
  std::atomic<bool> helper_ran{false};
  const std::thread::id caller = std::this_thread::get_id();
  const auto work = [&] {
    if (std::this_thread::get_id() != caller) {
      on_helper();
      helper_ran = true;
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!helper_ran && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  };
  EXPECT_TRUE(SpinPool::Get().TryHelp(1, work));
  return helper_ran.load();
}

TEST(SpinPoolTest, HelpersTakeWorkWhenTheCallerIsSlow) {
  // Also the first region of a helper made for it, when it starts late.
  EXPECT_TRUE(HelperJoinsWhileCallerWaits());
}

TEST(SpinPoolTest, SleepingHelpersWake) {
  // Past the spin time (PDSERVE_POOL_SPIN_US, 200 us by default) the
  // helpers sleep; the next region must still get them.
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(HelperJoinsWhileCallerWaits()) << "round " << round;
  }
}

TEST(SpinPoolTest, NestedAndConcurrentCallersAreRefusedNotDeadlocked) {
  std::atomic<int> nested_refused{0}, outer_calls{0};
  std::atomic<bool> release{false};
  std::atomic<int> entered{0};
  const auto work = [&] {
    ++outer_calls;
    // On the caller the pool is busy; on a helper it is a pool thread.
    if (!SpinPool::Get().TryHelp(1, [] {})) ++nested_refused;
    ++entered;
    while (!release) std::this_thread::yield();
  };
  std::thread first([&] { EXPECT_TRUE(SpinPool::Get().TryHelp(1, work)); });
  while (entered.load() == 0) std::this_thread::yield();
  // Another thread's region while the first is running: refused at once.
  bool second = true;
  std::thread other([&] { second = SpinPool::Get().TryHelp(1, [] {}); });
  other.join();
  EXPECT_FALSE(second);
  release = true;
  first.join();
  EXPECT_EQ(nested_refused.load(), outer_calls.load());
  // Free again afterwards.
  EXPECT_EQ(TakeChunks(1, 10), std::vector<int>(10, 1));
}

TEST(SpinPoolTest, ManyCallersInTurnShareThePool) {
  // Two threads call in a loop: each call either runs (every chunk once)
  // or is refused while the other one holds the pool.
  std::atomic<int> ran{0}, refused{0}, bad{0};
  const auto caller = [&] {
    for (int i = 0; i < 2000; ++i) {
      std::atomic<int> sum{0};
      std::atomic<int64_t> next{0};
      const auto work = [&] {
        for (int64_t c = next.fetch_add(1); c < 8; c = next.fetch_add(1)) sum += static_cast<int>(c);
      };
      if (SpinPool::Get().TryHelp(1, work)) {
        ++ran;
        if (sum.load() != 28) ++bad;
      } else {
        ++refused;
      }
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(ran.load() + refused.load(), 4000);
  EXPECT_GT(ran.load(), 0);
}

TEST(SpinPoolTest, OnlyPoolThreadsSayTheyAre) {
  EXPECT_FALSE(OnSpinPoolThread());
  std::atomic<int> on_pool{0};
  ASSERT_TRUE(HelperJoinsWhileCallerWaits([&] {
    if (OnSpinPoolThread()) ++on_pool;
  }));
  EXPECT_GE(on_pool.load(), 1);
}

}  // namespace
}  // namespace pdserve
