// The decode matrix-vector kernels (common/kernels/gemv_kernels.h): each ISA
// build against a double-precision reference (fp32 and bf16 weights, K with
// and without 16- and 8-wide tails, every row count up to kGemvMaxRows, odd
// column ranges); a row's result does not depend on how many rows share its
// pass (batch invariance); and the AVX-512 build gives the AVX2 build's bits
// exactly, where the CPU has AVX-512. One case tests one ISA (Avx2/..., Avx512/...):
// where the CPU lacks it, that case skips with GTEST_SKIP and its reason.
#include "common/kernels/gemv_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace pdserve {
namespace {

struct Problem {
  int64_t M, K, N;
  std::vector<float> x, w;  // w fp32 (bf16-exact copies when used as bf16)
  std::vector<uint16_t> w16;

  Problem(int64_t m, int64_t k, int64_t n, uint32_t seed) : M(m), K(k), N(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t i = 0; i < M * K; ++i) x.push_back(dist(rng));
    for (int64_t i = 0; i < N * K; ++i) {
      w.push_back(dist(rng));
      w16.push_back(static_cast<uint16_t>(testing::FloatBits(w.back()) >> 16));  // truncated
    }
  }
  float W16(int64_t i) const { return testing::Bf16ToFloat(w16[i]); }
  // Columns [n0, n1) of rows [m0, m0 + rows), written into y [M, N] (NaN elsewhere).
  std::vector<float> Run(bool bf16, GemvIsa isa, int64_t m0, int64_t rows, int64_t n0, int64_t n1) const {
    std::vector<float> y(M * N, NAN);
    if (bf16) {
      GemvBf16(x.data() + m0 * K, rows, K, w16.data(), n0, n1, y.data() + m0 * N, N, isa);
    } else {
      GemvF32(x.data() + m0 * K, rows, K, w.data(), n0, n1, y.data() + m0 * N, N, isa);
    }
    return y;
  }
};

const int64_t kKs[] = {1, 7, 8, 15, 16, 24, 31, 32, 40, 48, 63, 100, 768};
bool Skip(GemvIsa isa) { return !GemvIsaAvailable(isa); }

// The cases run once per ISA: Avx2/GemvKernelsIsaTest.*, Avx512/GemvKernelsIsaTest.*.
class GemvKernelsIsaTest : public ::testing::TestWithParam<GemvIsa> {
 protected:
  void SetUp() override {
    if (Skip(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << (GetParam() == GemvIsa::kAvx512 ? "AVX-512F (or AVX2+FMA)" : "AVX2+FMA");
    }
  }
};

TEST_P(GemvKernelsIsaTest, MatchesDoubleReference) {
  const GemvIsa isa = GetParam();
  for (bool bf16 : {false, true}) {
    for (int64_t K : kKs) {
      for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
        const Problem p(M, K, 11, static_cast<uint32_t>(K * 10 + M));
        const std::vector<float> y = p.Run(bf16, isa, 0, M, 0, p.N);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < p.N; ++n) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double wk = bf16 ? p.W16(n * K + k) : p.w[n * K + k];
              ref += p.x[m * K + k] * wk;
              mag += std::fabs(p.x[m * K + k] * wk);
            }
            ASSERT_NEAR(y[m * p.N + n], ref, 1e-5 * mag + 1e-6)
                << GemvIsaName(isa) << " bf16=" << bf16 << " K=" << K << " M=" << M << " m=" << m << " n=" << n;
          }
        }
      }
    }
  }
}

// Row m of a pass of M rows equals the same row run alone, bit for bit, and a
// column range gives the columns of the whole range.
TEST_P(GemvKernelsIsaTest, RowResultIndependentOfRowsAndColumnRange) {
  const GemvIsa isa = GetParam();
  for (bool bf16 : {false, true}) {
    for (int64_t K : {24, 100, 768}) {
      const Problem p(kGemvMaxRows, K, 23, static_cast<uint32_t>(K));
      const std::vector<float> all = p.Run(bf16, isa, 0, kGemvMaxRows, 0, p.N);
      for (int64_t m = 0; m < kGemvMaxRows; ++m) {
        const std::vector<float> one = p.Run(bf16, isa, m, 1, 3, 22);  // odd start, 19 columns
        for (int64_t n = 3; n < 22; ++n) {
          ASSERT_EQ(std::memcmp(&one[m * p.N + n], &all[m * p.N + n], 4), 0)
              << GemvIsaName(isa) << " bf16=" << bf16 << " K=" << K << " m=" << m << " n=" << n;
        }
        EXPECT_TRUE(std::isnan(one[m * p.N + 2]) && std::isnan(one[m * p.N + 22]));  // nothing outside
      }
    }
  }
}

TEST(GemvKernelsTest, Avx512GivesAvx2Bits) {
  if (Skip(GemvIsa::kAvx512) || Skip(GemvIsa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX-512F (or AVX2+FMA)";
  for (bool bf16 : {false, true}) {
    for (int64_t K : kKs) {
      for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
        const Problem p(M, K, 37, static_cast<uint32_t>(K * 7 + M));
        for (int64_t n0 : {0, 1, 5}) {
          const std::vector<float> a = p.Run(bf16, GemvIsa::kAvx2, 0, M, n0, p.N);
          const std::vector<float> b = p.Run(bf16, GemvIsa::kAvx512, 0, M, n0, p.N);
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
              << "bf16=" << bf16 << " K=" << K << " M=" << M << " n0=" << n0;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Avx2, GemvKernelsIsaTest, ::testing::Values(GemvIsa::kAvx2),
                         [](const ::testing::TestParamInfo<GemvIsa>&) { return std::string("Avx2"); });
INSTANTIATE_TEST_SUITE_P(Avx512, GemvKernelsIsaTest, ::testing::Values(GemvIsa::kAvx512),
                         [](const ::testing::TestParamInfo<GemvIsa>&) { return std::string("Avx512"); });

TEST(GemvKernelsTest, DefaultIsaIsTheWidestUnlessForced) {
  const char* forced = std::getenv("PDSERVE_ISA");
  if (forced != nullptr && std::strcmp(forced, "avx2") == 0) {
    EXPECT_EQ(GemvDefaultIsa(), GemvIsa::kAvx2);
  } else {
    EXPECT_EQ(GemvDefaultIsa(), GemvIsaAvailable(GemvIsa::kAvx512) ? GemvIsa::kAvx512 : GemvIsa::kAvx2);
  }
}

}  // namespace
}  // namespace pdserve
