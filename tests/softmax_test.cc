#include "common/engine/softmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/base/casts.h"

namespace pdserve {
namespace {

uint64_t Bits(double x) { return absl::bit_cast<uint64_t>(x); }

// Distance in units in the last place between two finite doubles >= 0.
uint64_t UlpDistance(double a, double b) {
  const uint64_t x = Bits(a), y = Bits(b);
  return x > y ? x - y : y - x;
}

// softmax.h's definition written plainly: ExpNonPositive per id, eight
// running sums by id mod 8, the stated tree, one division each.
std::vector<double> Definition(const std::vector<float>& logits, double t) {
  std::vector<double> x(logits.size());
  double max_x = -INFINITY;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<double>(logits[i]) / t;
    if (x[i] > max_x) max_x = x[i];
  }
  double s[8] = {};
  for (size_t i = 0; i < x.size(); ++i) s[i % 8] += x[i] = ExpNonPositive(x[i] - max_x);
  const double z = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (double& e : x) e /= z;
  return x;
}

std::vector<float> NormalLogits(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> l(n);
  for (float& v : l) v = dist(rng);
  return l;
}

TEST(SoftmaxTest, ExpIsWithinOneUlpOfLibmOverTheNonPositiveRange) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> wide(-708.0, 0.0), near_zero(-2.0, 0.0);
  uint64_t worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = i % 2 ? wide(rng) : near_zero(rng);
    worst = std::max(worst, UlpDistance(ExpNonPositive(x), std::exp(x)));
  }
  EXPECT_LE(worst, 1u);
  EXPECT_EQ(ExpNonPositive(0.0), 1.0);
  EXPECT_EQ(ExpNonPositive(-0.0), 1.0);
}

TEST(SoftmaxTest, ExpHandlesSubnormalsUnderflowInfinityAndNan) {
  // Subnormal results: one rounding, so within a unit of the smallest
  // subnormal of libm's.
  for (double x = -745.0; x < -708.0; x += 0.37) {
    EXPECT_LE(std::fabs(ExpNonPositive(x) - std::exp(x)), std::numeric_limits<double>::denorm_min()) << x;
  }
  EXPECT_GT(ExpNonPositive(-745.0), 0.0);
  EXPECT_EQ(ExpNonPositive(-746.5), 0.0);
  EXPECT_EQ(ExpNonPositive(-1e300), 0.0);
  EXPECT_EQ(ExpNonPositive(-INFINITY), 0.0);
  EXPECT_TRUE(std::isnan(ExpNonPositive(std::nan(""))));
}

TEST(SoftmaxTest, EveryPathGivesTheDefinitionsBits) {
  // Sizes around the group of eight (tails of 0..7), a 128k row, and
  // temperatures that scale the spread.
  for (const size_t n : {1u, 2u, 7u, 8u, 9u, 15u, 16u, 1001u, 128003u}) {
    for (const double t : {1.0, 0.7, 0.05, 3.0}) {
      const std::vector<float> logits = NormalLogits(n, 2.0f, static_cast<uint32_t>(n));
      const std::vector<double> want = Definition(logits, t);
      std::vector<double> fast(n), portable(n);
      SoftmaxExtremes fx, px;
      ASSERT_TRUE(SoftmaxDouble(logits.data(), static_cast<int64_t>(n), t, fast.data(), &fx));
      ASSERT_TRUE(SoftmaxDoublePortable(logits.data(), static_cast<int64_t>(n), t, portable.data(), &px));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(fast[i]), Bits(want[i])) << "n " << n << " t " << t << " id " << i;
        ASSERT_EQ(Bits(portable[i]), Bits(want[i])) << "n " << n << " t " << t << " id " << i;
      }
      EXPECT_EQ(fx.max_p, *std::max_element(want.begin(), want.end()));
      EXPECT_EQ(fx.min_p, *std::min_element(want.begin(), want.end()));
      EXPECT_EQ(px.max_p, fx.max_p);
      EXPECT_EQ(px.min_p, fx.min_p);
    }
  }
}

TEST(SoftmaxTest, FollowsLibmSoftmaxAndSumsToOne) {
  const std::vector<float> logits = NormalLogits(128000, 1.0f, 9);
  std::vector<double> p(logits.size());
  SoftmaxExtremes ex;
  ASSERT_TRUE(SoftmaxDouble(logits.data(), static_cast<int64_t>(logits.size()), 0.8, p.data(), &ex));
  double max_x = -INFINITY, z = 0.0, sum = 0.0;
  for (float l : logits) max_x = std::max(max_x, l / 0.8);
  for (float l : logits) z += std::exp(l / 0.8 - max_x);
  for (size_t i = 0; i < p.size(); ++i) {
    const double libm = std::exp(logits[i] / 0.8 - max_x) / z;
    ASSERT_NEAR(p[i], libm, 1e-13 * libm) << i;
    sum += p[i];
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(SoftmaxTest, MaskedIdsGetZeroAndNonFiniteRowsAreRefused) {
  std::vector<float> l = {1.0f, -INFINITY, 2.0f, -INFINITY, 0.5f, 3.0f, -INFINITY, 1.0f, 2.0f, -INFINITY};
  std::vector<double> p(l.size());
  SoftmaxExtremes ex;
  ASSERT_TRUE(SoftmaxDouble(l.data(), static_cast<int64_t>(l.size()), 1.0, p.data(), &ex));
  for (size_t i : {1u, 3u, 6u, 9u}) EXPECT_EQ(p[i], 0.0) << i;
  EXPECT_EQ(ex.min_p, 0.0);
  EXPECT_EQ(ex.max_p, p[5]);
  EXPECT_EQ(p[0], p[7]);  // equal logits, equal bits
  for (const float bad : {std::nanf(""), INFINITY}) {
    for (const size_t at : {0u, 5u, 9u}) {  // in the vector part and in the tail
      std::vector<float> b = l;
      b[at] = bad;
      EXPECT_FALSE(SoftmaxDouble(b.data(), static_cast<int64_t>(b.size()), 1.0, p.data(), &ex)) << bad << " at " << at;
      EXPECT_FALSE(SoftmaxDoublePortable(b.data(), static_cast<int64_t>(b.size()), 1.0, p.data(), &ex));
    }
  }
  const std::vector<float> none(12, -INFINITY);
  std::vector<double> q(none.size());
  EXPECT_FALSE(SoftmaxDouble(none.data(), 12, 1.0, q.data(), &ex));
  EXPECT_FALSE(SoftmaxDoublePortable(none.data(), 12, 1.0, q.data(), &ex));
}

}  // namespace
}  // namespace pdserve
