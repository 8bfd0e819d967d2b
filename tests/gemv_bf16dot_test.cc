// The bf16-dot decode kernel (common/kernels/gemv_bf16dot.h), where the CPU
// has AVX512_BF16 (skipped, saying so, where it does not): against a
// double-precision product of the bf16-rounded x and the bf16 weights (K
// with and without a 32-wide tail, every row count up to kGemvMaxRows, odd
// column ranges); a row's result does not depend on how many rows share its
// pass (batch invariance); x really is rounded to bf16 (nearest even).
#include "common/kernels/gemv_bf16dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using testing::Bf16ToFloat;
using testing::FloatToBf16;

struct Problem {
  int64_t M, K, N;
  std::vector<float> x;
  std::vector<uint16_t> w;

  Problem(int64_t m, int64_t k, int64_t n, uint32_t seed) : M(m), K(k), N(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t i = 0; i < M * K; ++i) x.push_back(dist(rng));
    for (int64_t i = 0; i < N * K; ++i) w.push_back(FloatToBf16(dist(rng)));
  }
  // sum_k bf16(x[m, k]) * w[n, k] in double, and sum_k |.| for the bound.
  double Exact(int64_t m, int64_t n, double* magnitude) const {
    double s = 0, a = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double p = double(Bf16ToFloat(FloatToBf16(x[m * K + k]))) * double(Bf16ToFloat(w[n * K + k]));
      s += p;
      a += std::fabs(p);
    }
    *magnitude = a;
    return s;
  }
};

#define SKIP_WITHOUT_BF16_DOT()                                                                          \
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU (or PDSERVE_ISA) has no AVX512_BF16: the dot " \
                                               "kernel cannot run here"

TEST(GemvBf16DotTest, MatchesTheProductOfRoundedActivations) {
  SKIP_WITHOUT_BF16_DOT();
  for (int64_t K : {8, 32, 40, 100, 768, 1536}) {
    for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
      const Problem p(M, K, 23, static_cast<uint32_t>(K * 10 + M));
      std::vector<float> y(M * p.N, -1.0f);
      GemvBf16Dot(p.x.data(), M, K, p.w.data(), 3, 21, y.data(), p.N);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < p.N; ++n) {
          if (n < 3 || n >= 21) {
            EXPECT_EQ(y[m * p.N + n], -1.0f) << "column " << n << " outside [3, 21) was written";
            continue;
          }
          double magnitude = 0;
          const double exact = p.Exact(m, n, &magnitude);
          // fp32 accumulation of exact products: a few ulps of the magnitude.
          EXPECT_NEAR(y[m * p.N + n], exact, 4e-7 * magnitude + 1e-30) << "K=" << K << " M=" << M << " n=" << n;
        }
      }
    }
  }
}

TEST(GemvBf16DotTest, RowBitsDoNotDependOnTheBatch) {
  SKIP_WITHOUT_BF16_DOT();
  const Problem p(kGemvMaxRows, 200, 13, 7);
  std::vector<float> all(kGemvMaxRows * p.N);
  GemvBf16Dot(p.x.data(), kGemvMaxRows, p.K, p.w.data(), 0, p.N, all.data(), p.N);
  for (int64_t m = 0; m < kGemvMaxRows; ++m) {
    std::vector<float> one(p.N);
    GemvBf16Dot(p.x.data() + m * p.K, 1, p.K, p.w.data(), 0, p.N, one.data(), p.N);
    for (int64_t n = 0; n < p.N; ++n) EXPECT_EQ(one[n], all[m * p.N + n]) << "row " << m << " column " << n;
  }
}

// Weight rows go 4 to a pass with the leftovers alone (and the 4-row pass
// reduces its accumulators together): a column's bits do not depend on
// which rows share its pass.
TEST(GemvBf16DotTest, ColumnBitsDoNotDependOnTheirPass) {
  SKIP_WITHOUT_BF16_DOT();
  for (int64_t K : {40, 768}) {
    for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
      const Problem p(M, K, 11, static_cast<uint32_t>(K + M));
      std::vector<float> all(M * p.N);
      GemvBf16Dot(p.x.data(), M, p.K, p.w.data(), 0, p.N, all.data(), p.N);  // passes of 4, 4, then 3 alone
      for (int64_t n0 = 0; n0 < p.N; ++n0) {
        std::vector<float> part(M * p.N);
        GemvBf16Dot(p.x.data(), M, p.K, p.w.data(), n0, std::min<int64_t>(p.N, n0 + 1 + n0 % 5), part.data(), p.N);
        for (int64_t m = 0; m < M; ++m) {
          EXPECT_EQ(part[m * p.N + n0], all[m * p.N + n0]) << "K=" << K << " M=" << M << " column " << n0;
        }
      }
    }
  }
}

TEST(GemvBf16DotTest, RoundsActivationsToNearestEven) {
  SKIP_WITHOUT_BF16_DOT();
  // x = 1 + 2^-8 (exactly halfway between two bf16 values) rounds down to 1;
  // 1 + 3 * 2^-8 rounds up to 1 + 2^-6. With w = 1 the output is bf16(x).
  const std::vector<float> x = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256};
  const std::vector<uint16_t> w = {FloatToBf16(1.0f)};
  float y[2] = {0, 0};
  GemvBf16Dot(x.data(), 2, 1, w.data(), 0, 1, y, 1);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f + 1.0f / 64);
}

}  // namespace
}  // namespace pdserve
