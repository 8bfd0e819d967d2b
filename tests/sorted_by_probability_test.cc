#include "common/engine/sorted_by_probability.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace pdserve {
namespace {

// p normalised to sum 1, with its extremes, as SampleToken passes them.
struct Row {
  std::vector<double> p;
  double max_p = 0.0, min_p = 1.0;
};

Row Normalised(std::vector<double> w) {
  Row r;
  const double z = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) {
    x /= z;
    r.max_p = std::max(r.max_p, x);
    r.min_p = std::min(r.min_p, x);
  }
  r.p = std::move(w);
  return r;
}

std::vector<int64_t> FullSort(const std::vector<double>& p) {
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  return order;
}

void ExpectFullSortOrder(const Row& r) {
  ProbabilitySortScratch scratch;
  const auto vocab = static_cast<int64_t>(r.p.size());
  SortedByProbability order(r.p.data(), vocab, r.max_p, r.min_p, /*with_masses=*/false, &scratch);
  const std::vector<int64_t> want = FullSort(r.p);
  for (int64_t i = 0; i < vocab; ++i) ASSERT_EQ(order.At(i), want[i]) << "position " << i << " of " << vocab;
}

TEST(SortedByProbabilityTest, OrderIsProbabilityDescendingTiesToTheLowerId) {
  ExpectFullSortOrder(Normalised({0.1, 0.4, 0.1, 0.3, 0.1}));
  ExpectFullSortOrder(Normalised({1, 1, 1, 1, 1, 1, 1}));  // one bucket of ties
  ExpectFullSortOrder(Normalised({5}));
}

TEST(SortedByProbabilityTest, OrderHoldsAcrossBucketsForNarrowWideAndTiedRows) {
  std::mt19937 rng(3);
  for (const double spread : {1e-12, 1e-3, 1.0, 30.0, 300.0}) {  // log-probability spread: one bucket .. underflow
    for (const bool tied : {false, true}) {
      std::normal_distribution<double> dist(0.0, spread);
      std::vector<double> w(20000);
      for (double& x : w) {
        const double l = tied ? std::round(dist(rng) / spread * 4.0) / 4.0 * spread : dist(rng);
        x = std::exp(std::min(l, 700.0) - 700.0);  // some underflow to 0 at the widest spread
      }
      SCOPED_TRACE(testing::Message() << "spread " << spread << " tied " << tied);
      ExpectFullSortOrder(Normalised(w));
    }
  }
}

TEST(SortedByProbabilityTest, IdsPastTheKeyBitsSortByComparison) {
  // 32 octaves of probabilities leave 19 bits of a sort key for the id:
  // 600,000 ids do not fit, and the buckets sort by comparing instead.
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> octaves(0.0, 32.0);
  std::vector<double> w(600000);
  for (double& x : w) x = std::exp2(-std::floor(octaves(rng) * 64.0) / 64.0);  // ties too
  ExpectFullSortOrder(Normalised(w));
}

TEST(SortedByProbabilityTest, DrawUntruncatedIsTheFirstIdWhoseSumExceedsU) {
  const Row r = Normalised({1, 1, 1, 1});  // exactly 0.25 each: crossings at 0.25, 0.5, 0.75
  ProbabilitySortScratch scratch;
  SortedByProbability order(r.p.data(), 4, r.max_p, r.min_p, /*with_masses=*/true, &scratch);
  const double s = order.slack();
  ASSERT_GT(s, 0.0);
  ASSERT_LT(s, 1e-9);
  EXPECT_EQ(order.DrawUntruncated(0.0), 0);
  EXPECT_EQ(order.DrawUntruncated(0.1), 0);
  EXPECT_EQ(order.DrawUntruncated(0.25 - 2 * s), 0);
  EXPECT_EQ(order.DrawUntruncated(0.3), 1);
  EXPECT_EQ(order.DrawUntruncated(0.5 + 2 * s), 2);
  EXPECT_EQ(order.DrawUntruncated(0.99), 3);
  // Within the slack of a crossing the rounding of another summation order
  // could decide it: the caller walks the exact order instead.
  EXPECT_EQ(order.DrawUntruncated(0.5 - s / 2), std::nullopt);
  EXPECT_EQ(order.DrawUntruncated(0.5), std::nullopt);
  EXPECT_EQ(order.DrawUntruncated(0.5 + s / 2), std::nullopt);
  EXPECT_EQ(order.DrawUntruncated(1.0), std::nullopt);  // past the total
  // The walk still reads the exact order after a draw sorted a bucket.
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(order.At(i), i);
}

TEST(SortedByProbabilityTest, DrawUntruncatedFollowsTheSortedOrderAcrossBuckets) {
  const Row r = Normalised({0.1, 0.4, 0.1, 0.3, 0.1});  // order 1, 3, 0, 2, 4
  ProbabilitySortScratch scratch;
  SortedByProbability order(r.p.data(), 5, r.max_p, r.min_p, /*with_masses=*/true, &scratch);
  const std::vector<std::pair<double, int64_t>> cases = {{0.2, 1}, {0.55, 3}, {0.75, 0}, {0.85, 2}, {0.95, 4}};
  for (const auto& [u, id] : cases) EXPECT_EQ(order.DrawUntruncated(u), id) << "u " << u;
}

TEST(SortedByProbabilityTest, DrawUntruncatedNeedsTheMasses) {
  const Row r = Normalised({1, 2, 3});
  ProbabilitySortScratch scratch;
  SortedByProbability order(r.p.data(), 3, r.max_p, r.min_p, /*with_masses=*/false, &scratch);
  EXPECT_EQ(order.DrawUntruncated(0.5), std::nullopt);
  EXPECT_EQ(order.At(0), 2);
}

}  // namespace
}  // namespace pdserve
