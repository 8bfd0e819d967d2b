// GemmMxfp4Fma (common/kernels/mxfp4.h), the prefill path of the fp32-x
// MXFP4 kernel, against GemvMxfp4Reference bit for bit, per build (Avx2:
// GemvMxfp4Fma per kGemvMaxRows rows; Avx512: the decoded-panel GEMM, which
// skips with GTEST_SKIP on a CPU without AVX-512F, scripts/test_skips.sh):
// - M = 1..70 (every remainder of the 5-row blocking and of kGemvMaxRows,
//   one and two 64-row chunks) and 130 (three), K = 32, 64, 96 (odd block
//   counts), 768 and gpt-oss's 2880 (partial 1024-element slices), sub-ranges
//   [n0, n1) with 1-3 leftover weight rows (nothing written outside), with
//   and without bias, ldy wider than N;
// - every scale byte 0..254 (subnormal, ordinary and overflowing weights),
//   with x ~ N(0, 1) and x / 2^100; a 255 scale NaNs exactly its row;
// - the default dispatch (no `isa`) and GemvMxfp4Fma's bits row by row,
//   whatever the batch: y of a row does not depend on M.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "common/kernels/mxfp4.h"
#include "tests/mxfp4_test_util.h"

namespace pdserve {
namespace {

struct Problem {
  int64_t M, K, N, nb;
  std::vector<uint8_t> blocks, scales;
  std::vector<float> bias, x, xp;  // x [M, K] plain, xp packed

  Problem(int64_t m, int64_t k, int64_t n, uint32_t seed, int scale_lo = 117, int scale_hi = 137)
      : M(m), K(k), N(n), nb(k / kMxfp4Block), blocks(n * Mxfp4RowBytes(k)), scales(n * nb), bias(n), x(m * k) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255), scale(scale_lo, scale_hi);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& s : scales) s = static_cast<uint8_t>(scale(rng));
    for (float& b : bias) b = normal(rng);
    for (float& v : x) v = normal(rng);
    Pack();
  }
  void Pack() {
    xp.resize(M * K);
    PackRowsMxfp4(x.data(), M, K, xp.data());
  }
  Mxfp4Matrix Matrix(bool with_bias) const {
    return {blocks.data(), scales.data(), with_bias ? bias.data() : nullptr, K};
  }
};

// y [M, ldy] with NaN sentinels outside the columns written.
std::vector<float> Reference(const Problem& p, bool bias, int64_t n0, int64_t n1, int64_t ldy) {
  std::vector<float> y(p.M * ldy, NAN);
  GemvMxfp4Reference(p.x.data(), p.M, p.Matrix(bias), n0, n1, y.data(), ldy);
  return y;
}

std::vector<float> Gemm(const Problem& p, const GemvIsa* isa, bool bias, int64_t n0, int64_t n1, int64_t ldy) {
  std::vector<float> y(p.M * ldy, NAN);
  if (isa != nullptr) {
    GemmMxfp4Fma(p.xp.data(), p.M, p.Matrix(bias), n0, n1, y.data(), ldy, *isa);
  } else {
    GemmMxfp4Fma(p.xp.data(), p.M, p.Matrix(bias), n0, n1, y.data(), ldy);
  }
  return y;
}

using testing::ExpectSame;  // mxfp4_test_util.h

std::string What(GemvIsa isa, const Problem& p, bool bias, int64_t n0, int64_t n1) {
  return std::string(GemvIsaName(isa)) + " K=" + std::to_string(p.K) + " N=" + std::to_string(p.N) +
         " M=" + std::to_string(p.M) + " bias=" + std::to_string(bias) + " n=[" + std::to_string(n0) + "," +
         std::to_string(n1) + ")";
}

class Mxfp4GemmTest : public ::testing::TestWithParam<GemvIsa> {
 protected:
  void SetUp() override {
    if (!Mxfp4Available()) GTEST_SKIP() << "this CPU lacks AVX2/FMA";
    if (GetParam() == GemvIsa::kAvx512 && !Mxfp4FmaAvx512Available()) GTEST_SKIP() << "this CPU lacks AVX-512F";
  }
  void Check(const Problem& p, bool bias, int64_t n0, int64_t n1, int64_t ldy) const {
    const GemvIsa isa = GetParam();
    ExpectSame(Gemm(p, &isa, bias, n0, n1, ldy), Reference(p, bias, n0, n1, ldy), What(isa, p, bias, n0, n1));
  }
};

TEST_P(Mxfp4GemmTest, EveryRowCountMatchesReferenceBitForBit) {
  for (int64_t K : {32, 64, 96}) {
    for (int64_t M = 1; M <= 70; ++M) {
      const Problem p(M, K, 11, static_cast<uint32_t>(K * 101 + M));
      for (bool bias : {false, true}) Check(p, bias, 1, p.N - 1, p.N + 3);
    }
  }
}

TEST_P(Mxfp4GemmTest, LongRowsAndRangesMatchReferenceBitForBit) {
  for (int64_t K : {768, 2880}) {
    for (int64_t M : {1, 4, 5, 6, 17, 64, 70, 130}) {
      const Problem p(M, K, 14, static_cast<uint32_t>(K + M));
      for (bool bias : {false, true}) {
        for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 14}, {1, 12}, {3, 6}, {5, 6}}) Check(p, bias, n0, n1, 14);
      }
    }
  }
}

// Scale bytes 0..254 across the blocks (5 a row), then x / 2^100.
TEST_P(Mxfp4GemmTest, EveryScaleByteMatchesReference) {
  for (int64_t M : {3, 7, 12}) {
    Problem p(M, 160, 51, static_cast<uint32_t>(M + 7));
    for (size_t i = 0; i < p.scales.size(); ++i) p.scales[i] = static_cast<uint8_t>(i % 255);
    Check(p, true, 0, p.N, p.N);
    for (float& v : p.x) v = std::ldexp(v, -100);
    p.Pack();
    Check(p, false, 0, p.N, p.N);
  }
}

TEST_P(Mxfp4GemmTest, NanScaleReachesOnlyItsRow) {
  Problem p(13, 96, 9, 11);
  p.scales[4 * p.nb + 1] = 255;
  const GemvIsa isa = GetParam();
  const std::vector<float> y = Gemm(p, &isa, true, 0, p.N, p.N);
  ExpectSame(y, Reference(p, true, 0, p.N, p.N), "nan scale");
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = 0; n < p.N; ++n) EXPECT_EQ(std::isnan(y[m * p.N + n]), n == 4) << m << "," << n;
  }
}

// Row m of a 37-row GEMM is GemvMxfp4Fma's result for that row alone.
TEST_P(Mxfp4GemmTest, EachRowIsItsDecodeResult) {
  const Problem p(37, 2880, 10, 5);
  const GemvIsa isa = GetParam();
  const std::vector<float> y = Gemm(p, &isa, true, 0, p.N, p.N);
  std::vector<float> one(p.N);
  for (int64_t m = 0; m < p.M; ++m) {
    GemvMxfp4Fma(p.xp.data() + m * p.K, 1, p.Matrix(true), 0, p.N, one.data(), p.N, isa);
    ASSERT_EQ(std::memcmp(one.data(), &y[m * p.N], p.N * 4), 0) << "row " << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Avx2, Mxfp4GemmTest, ::testing::Values(GemvIsa::kAvx2));
INSTANTIATE_TEST_SUITE_P(Avx512, Mxfp4GemmTest, ::testing::Values(GemvIsa::kAvx512));

// Without `isa`: whichever build (or the scalar path) runs, the reference's bits.
TEST(Mxfp4GemmDefaultTest, DefaultDispatchMatchesReference) {
  const Problem p(23, 160, 13, 3);
  ExpectSame(Gemm(p, nullptr, true, 0, p.N, p.N), Reference(p, true, 0, p.N, p.N), "default");
}

}  // namespace
}  // namespace pdserve
