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

// docs/model.md's nucleus draw without top_k, on the full sort: the
// shortest prefix whose ordered sum reaches top_p, then the first id whose
// terms p / mass, summed in order, exceed u.
int64_t SpecNucleusDraw(const std::vector<double>& p, const std::vector<int64_t>& order, double top_p, double u) {
  const auto vocab = static_cast<int64_t>(p.size());
  int64_t m = vocab;
  double mass = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    mass += p[order[i]] / 1.0;
    if (mass >= top_p) {
      m = i + 1;
      break;
    }
  }
  double cum = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    cum += p[order[i]] / 1.0 / mass;
    if (cum > u) return order[i];
  }
  return order[m - 1];
}

TEST(SortedByProbabilityTest, DrawNucleusIsTheSpecsTruncatedDraw) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int deferred = 0, draws = 0;
  for (const double spread : {1e-3, 0.3, 1.0, 3.0, 30.0}) {
    for (const bool tied : {false, true}) {
      std::normal_distribution<double> dist(0.0, spread);
      std::vector<double> w(30000);
      for (double& x : w) x = std::exp(tied ? std::round(dist(rng) / spread * 4.0) / 4.0 * spread : dist(rng));
      const Row r = Normalised(w);
      const std::vector<int64_t> want_order = FullSort(r.p);
      ProbabilitySortScratch scratch;
      for (const double top_p : {0.05, 0.5, 0.9, 0.999}) {
        for (int k = 0; k < 20; ++k) {
          const double u = uniform(rng);
          SortedByProbability order(r.p.data(), 30000, r.max_p, r.min_p, /*with_masses=*/true, &scratch);
          const std::optional<int64_t> got = order.DrawNucleus(top_p, u);
          ++draws;
          if (!got) {
            ++deferred;
            continue;
          }
          ASSERT_EQ(*got, SpecNucleusDraw(r.p, want_order, top_p, u))
              << "spread " << spread << " tied " << tied << " top_p " << top_p << " u " << u;
        }
      }
    }
  }
  // A deferral needs a sum within ~1e-9 of top_p or of u * mass.
  EXPECT_LE(deferred, draws / 100) << deferred << " of " << draws;
}

TEST(SortedByProbabilityTest, DrawNucleusDefersNearACrossingAndKeepsALoneId) {
  const Row r = Normalised({1, 1, 1, 1});  // 0.25 each
  ProbabilitySortScratch scratch;
  SortedByProbability order(r.p.data(), 4, r.max_p, r.min_p, /*with_masses=*/true, &scratch);
  const double s = order.slack();
  // top_p 0.6 keeps 3 ids (mass 0.75): renormalised crossings at 1/3, 2/3.
  EXPECT_EQ(order.DrawNucleus(0.6, 0.0), 0);
  EXPECT_EQ(order.DrawNucleus(0.6, 0.5), 1);
  EXPECT_EQ(order.DrawNucleus(0.6, 0.9), 2);
  EXPECT_EQ(order.DrawNucleus(0.6, 1.0 - 0x1p-53), 2);
  EXPECT_EQ(order.DrawNucleus(0.6, 1.0 / 3.0), std::nullopt);  // u * mass at a crossing
  EXPECT_EQ(order.DrawNucleus(0.5, 0.1), std::nullopt);        // the sum meets top_p exactly
  EXPECT_EQ(order.DrawNucleus(0.5 + s / 2, 0.1), std::nullopt);
  EXPECT_EQ(order.DrawNucleus(0.5 + 2 * s, 0.1), 0);
  // One id reaching top_p alone is drawn whatever u is.
  const Row peaked = Normalised({1, 8, 1});
  SortedByProbability lone(peaked.p.data(), 3, peaked.max_p, peaked.min_p, /*with_masses=*/true, &scratch);
  EXPECT_EQ(lone.DrawNucleus(0.7, 0.999), 1);
  EXPECT_EQ(lone.DrawNucleus(0.8, 0.999), 1);  // 8/10 reaches 0.8 exactly: the first term is exact
  SortedByProbability bare(peaked.p.data(), 3, peaked.max_p, peaked.min_p, /*with_masses=*/false, &scratch);
  EXPECT_EQ(bare.DrawNucleus(0.7, 0.5), std::nullopt);
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
