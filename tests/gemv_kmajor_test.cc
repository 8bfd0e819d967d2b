// The k-major bf16 decode kernel (common/kernels/gemv_kmajor.h): its pack
// holds W's values where the layout says; each build's outputs equal, bit
// for bit, one sequential fp32 FMA chain per output over k (the contract
// that makes a row's bits independent of its batch, its neighbours, the
// split of the output columns and the ISA); and they stay within fp32
// rounding of a double-precision reference. The dot kernel on the same
// packs (GemvBf16KMajorDot) gives each row the bits it has alone, within
// fp32 rounding of the double sum over bf16(x). The AVX-512 cases skip,
// saying so, on a CPU without AVX-512F, the dot cases without AVX512_BF16.
#include "common/kernels/gemv_kmajor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/kernels/gemv_bf16dot.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using testing::Bf16ToFloat;
using testing::FloatBits;

struct Problem {
  int64_t M, K, N;
  std::vector<float> x;
  std::vector<uint16_t> w, pack;

  Problem(int64_t m, int64_t k, int64_t n, uint32_t seed) : M(m), K(k), N(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t i = 0; i < M * K; ++i) x.push_back(dist(rng));
    for (int64_t i = 0; i < N * K; ++i) {
      w.push_back(static_cast<uint16_t>(FloatBits(dist(rng)) >> 16));  // truncated: any bf16 will do
    }
    pack.assign(KMajorElements(N, K), 0xffff);
    PackBf16KMajor(w.data(), N, K, 0, KMajorGroups(N), pack.data());
  }
  // The contract: acc = fma(W[n][k], x[m][k], acc) from 0, k in order.
  float Chain(int64_t m, int64_t n) const {
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k) acc = std::fma(Bf16ToFloat(w[n * K + k]), x[m * K + k], acc);
    return acc;
  }
  double Exact(int64_t m, int64_t n) const {
    double acc = 0.0;
    for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(Bf16ToFloat(w[n * K + k])) * x[m * K + k];
    return acc;
  }
  // x[m][k] rounded to bf16 (nearest even), as the dot kernel takes it.
  double ExactRounded(int64_t m, int64_t n) const {
    double acc = 0.0;
    for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(Bf16ToFloat(w[n * K + k])) * RoundBf16(x[m * K + k]);
    return acc;
  }
  static float RoundBf16(float f) { return Bf16ToFloat(testing::FloatToBf16(f)); }
  double Scale(int64_t m, int64_t n) const {
    double acc = 0.0;
    for (int64_t k = 0; k < K; ++k) acc += std::fabs(static_cast<double>(Bf16ToFloat(w[n * K + k])) * x[m * K + k]);
    return acc;
  }
};


bool Skip(GemvIsa isa) { return !GemvIsaAvailable(isa); }

TEST(GemvKMajorTest, PackPutsEachWeightWhereTheLayoutSays) {
  const Problem p(1, 37, 70, 1);  // N pads to 96: three groups, the last one 6 rows
  ASSERT_EQ(p.pack.size(), static_cast<size_t>(96 * 37));
  for (int64_t n = 0; n < 96; ++n) {
    for (int64_t k = 0; k < p.K; ++k) {
      const uint16_t got = p.pack[(n / 32) * p.K * 32 + k * 32 + n % 32];
      ASSERT_EQ(got, n < p.N ? p.w[n * p.K + k] : 0) << "n " << n << " k " << k;
    }
  }
}

class GemvKMajorIsaTest : public ::testing::TestWithParam<GemvIsa> {};

TEST_P(GemvKMajorIsaTest, EveryOutputIsOneFmaChainOverKForAnyRowsAndSplit) {
  const GemvIsa isa = GetParam();
  if (Skip(isa)) GTEST_SKIP() << "this CPU lacks " << GemvIsaName(isa) << " (or AVX2+FMA)";
  for (const int64_t K : {1, 16, 37, 768}) {
    for (const int64_t M : {1, 2, 3, 4, 5, 8, 9, 16, 17}) {
      const Problem p(M, K, 200, static_cast<uint32_t>(K * 100 + M));
      // Whole range, then split at a group boundary and inside a group.
      for (const int64_t cut : {int64_t{0}, int64_t{64}, int64_t{77}}) {
        std::vector<float> y(M * p.N, -1.0f);
        GemvBf16KMajor(p.x.data(), M, K, p.pack.data(), p.N, 0, cut, y.data(), p.N, isa);
        GemvBf16KMajor(p.x.data(), M, K, p.pack.data(), p.N, cut, p.N, y.data(), p.N, isa);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < p.N; ++n) {
            const float got = y[m * p.N + n];
            ASSERT_EQ(FloatBits(got), FloatBits(p.Chain(m, n))) << "K " << K << " M " << M << " cut " << cut << " m " << m
                                                      << " n " << n << ": " << got << " vs " << p.Chain(m, n);
            ASSERT_LE(std::fabs(got - p.Exact(m, n)), 1e-6 * K * p.Scale(m, n) + 1e-30);
          }
        }
      }
    }
  }
}

TEST_P(GemvKMajorIsaTest, ColumnsOutsideTheRangeAreNotWritten) {
  const GemvIsa isa = GetParam();
  if (Skip(isa)) GTEST_SKIP() << "this CPU lacks " << GemvIsaName(isa) << " (or AVX2+FMA)";
  const Problem p(3, 40, 100, 7);
  std::vector<float> y(3 * 120, 42.0f);
  GemvBf16KMajor(p.x.data(), 3, p.K, p.pack.data(), p.N, 10, 90, y.data(), 120, isa);
  for (int64_t m = 0; m < 3; ++m) {
    for (int64_t n = 0; n < 120; ++n) {
      if (n >= 10 && n < 90) {
        EXPECT_EQ(FloatBits(y[m * 120 + n]), FloatBits(p.Chain(m, n)));
      } else {
        EXPECT_EQ(y[m * 120 + n], 42.0f) << "m " << m << " n " << n;
      }
    }
  }
}

// The dot kernel: within fp32 rounding of the double sum over bf16(x), and
// each row's bits the same whatever the rows beside it or the split.
TEST(GemvKMajorDotTest, MatchesRoundedReferenceAndEachRowAlone) {
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU lacks AVX512_BF16 (or PDSERVE_ISA forces avx2)";
  for (const int64_t K : {1, 2, 37, 768}) {
    for (const int64_t M : {1, 3, 8, 9, 16, 17}) {
      const Problem p(M, K, 200, static_cast<uint32_t>(K * 100 + M));
      std::vector<float> alone(M * p.N);
      for (int64_t m = 0; m < M; ++m) {
        GemvBf16KMajorDot(p.x.data() + m * K, 1, K, p.pack.data(), p.N, 0, p.N, alone.data() + m * p.N, p.N);
      }
      for (const int64_t cut : {int64_t{0}, int64_t{64}, int64_t{77}}) {
        std::vector<float> y(M * p.N, -1.0f);
        GemvBf16KMajorDot(p.x.data(), M, K, p.pack.data(), p.N, 0, cut, y.data(), p.N);
        GemvBf16KMajorDot(p.x.data(), M, K, p.pack.data(), p.N, cut, p.N, y.data(), p.N);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < p.N; ++n) {
            const float got = y[m * p.N + n];
            ASSERT_EQ(FloatBits(got), FloatBits(alone[m * p.N + n]))
                << "K " << K << " M " << M << " cut " << cut << " m " << m << " n " << n;
            ASSERT_LE(std::fabs(got - p.ExactRounded(m, n)), 1e-6 * K * p.Scale(m, n) + 1e-30)
                << "K " << K << " M " << M << " m " << m << " n " << n << ": " << got << " vs "
                << p.ExactRounded(m, n);
          }
        }
      }
    }
  }
}

TEST(GemvKMajorDotTest, ColumnsOutsideTheRangeAreNotWritten) {
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU lacks AVX512_BF16 (or PDSERVE_ISA forces avx2)";
  const Problem p(3, 40, 100, 7);
  std::vector<float> y(3 * 120, 42.0f);
  GemvBf16KMajorDot(p.x.data(), 3, p.K, p.pack.data(), p.N, 10, 90, y.data(), 120);
  for (int64_t m = 0; m < 3; ++m) {
    for (int64_t n = 0; n < 120; ++n) {
      if (n >= 10 && n < 90) {
        EXPECT_NEAR(y[m * 120 + n], p.ExactRounded(m, n), 1e-6 * p.K * p.Scale(m, n) + 1e-30);
      } else {
        EXPECT_EQ(y[m * 120 + n], 42.0f) << "m " << m << " n " << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, GemvKMajorIsaTest, ::testing::Values(GemvIsa::kAvx2, GemvIsa::kAvx512),
                         [](const auto& info) { return std::string(GemvIsaName(info.param)); });

}  // namespace
}  // namespace pdserve
