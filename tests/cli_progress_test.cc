// common/cli/progress: the batch clients' progress line and its wait loop.
#include "common/cli/progress.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(FormatSecondsTest, RoundsToWholeUnits) {
  EXPECT_EQ(FormatSeconds(0), "0s");
  EXPECT_EQ(FormatSeconds(0.4), "0s");
  EXPECT_EQ(FormatSeconds(59.4), "59s");
  EXPECT_EQ(FormatSeconds(59.6), "1m00s");
  EXPECT_EQ(FormatSeconds(125), "2m05s");
  EXPECT_EQ(FormatSeconds(3599.6), "1h00m");
  EXPECT_EQ(FormatSeconds(3 * 3600 + 7 * 60 + 20), "3h07m");
}

TEST(FormatSecondsTest, NonsenseIsAQuestionMark) {
  EXPECT_EQ(FormatSeconds(-1), "?");
  EXPECT_EQ(FormatSeconds(std::nan("")), "?");
  EXPECT_EQ(FormatSeconds(2e7), "?");
}

TEST(ProgressStatsTest, RateElapsedAndEta) {
  // 10 of 40 in 5 s: 2/s, 30 left -> 15 s.
  EXPECT_EQ(ProgressStats(10, 40, 5.0, "req"), "2.00 req/s, elapsed 5s, ETA 15s");
  // Nothing done yet: no rate, no ETA.
  EXPECT_EQ(ProgressStats(0, 40, 5.0, "trials"), "0.00 trials/s, elapsed 5s, ETA ?");
  EXPECT_EQ(ProgressStats(40, 40, 80.0, "req"), "0.50 req/s, elapsed 1m20s, ETA 0s");
}

TEST(WaitWithProgressTest, ReturnsOnceAllAreDoneAndPrintsTheFinalLine) {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  const size_t total = 5;
  const auto start = std::chrono::steady_clock::now();
  std::thread worker([&] {
    for (size_t i = 0; i < total; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    }
  });
  std::vector<size_t> calls;  // `done` as each line saw it
  const double elapsed = WaitWithProgress(mu, cv, done, total, start, [&](size_t d, double) {
    calls.push_back(d);
    return std::string("line");
  });
  worker.join();
  EXPECT_EQ(done, total);
  EXPECT_GE(elapsed, 0.09);  // five 20 ms steps
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), total);  // the final line reports every item done
  for (size_t i = 0; i + 1 < calls.size(); ++i) EXPECT_LT(calls[i], total);  // only one final line
}

TEST(WaitWithProgressTest, NothingToWaitForReturnsAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 3;
  int lines = 0;
  const double elapsed = WaitWithProgress(mu, cv, done, 3, std::chrono::steady_clock::now(), [&](size_t, double) {
    ++lines;
    return std::string();
  });
  EXPECT_LT(elapsed, 1.0);
  EXPECT_EQ(lines, 1);
}

}  // namespace
}  // namespace pdserve
