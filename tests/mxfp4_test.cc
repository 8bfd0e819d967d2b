// The MXFP4 kernels (common/kernels/mxfp4.h):
// - the tables: the 16 FP4 codes, their doubled int8 form, e8m0 bytes as
//   exact powers of two (0 subnormal, 255 NaN);
// - the nibble order and the scales on hand-written blocks, against values
//   written out by hand (a swapped nibble order fails);
// - the scalar references against the exact product in double: the fp32-x
//   one within fp32 rounding, the int8-x one within x's rounding (its
//   stated bound) plus fp32 rounding;
// - each build of each kernel (Fma: AVX2, AVX-512F; Dot: AVX2, AVX-512
//   VNNI) against its reference bit for bit, on random shapes (K from 32
//   to 2880, odd block counts, non-power-of-two N, M = 1..kGemvMaxRows, a
//   sub-range [n0, n1) with nothing written outside), with and without
//   bias; every scale byte 0..254 (results may be inf or NaN there: NaN
//   where the reference is NaN, the same bits elsewhere); a 255 scale NaNs
//   exactly the outputs that read it;
// - the AVX-512 builds give the AVX2 builds' bits, on the same problems;
// - the builds taken without `isa` and Mxfp4KernelName.
// One case tests one ISA: Avx2/..., Avx512/... (AVX-512F), Avx512Vnni/...
// (AVX-512 F/BW/VL + VNNI); the AVX-512 ones skip with GTEST_SKIP, and
// their reason, on a CPU without the flags (scripts/test_skips.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/mxfp4.h"
#include "tests/mxfp4_test_util.h"

namespace pdserve {
namespace {

// Scale bytes drawn in [lo, hi]; x ~ N(0, 1) times 2^x_exp.
struct Draw {
  int lo = 117, hi = 137;
  int x_exp = 0;
};

struct Problem {
  int64_t M, K, N, nb;
  std::vector<uint8_t> blocks, scales;
  std::vector<float> bias, x;  // x [M, K], plain order

  Problem(int64_t m, int64_t k, int64_t n, uint32_t seed, Draw draw = {})
      : M(m), K(k), N(n), nb(k / kMxfp4Block), blocks(n * Mxfp4RowBytes(k)), scales(n * nb), bias(n), x(m * k) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255), scale(draw.lo, draw.hi);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(byte(rng));  // every code in both nibbles
    for (uint8_t& s : scales) s = static_cast<uint8_t>(scale(rng));
    for (float& b : bias) b = normal(rng);
    for (float& v : x) v = std::ldexp(normal(rng), draw.x_exp);
  }
  Mxfp4Matrix Matrix(bool with_bias) const {
    return {blocks.data(), scales.data(), with_bias ? bias.data() : nullptr, K};
  }

  // W[n, k] in double, from the layout's definition (not the library's).
  double Weight(int64_t n, int64_t k) const {
    const uint8_t byte = blocks[n * Mxfp4RowBytes(K) + k / 2];
    const int code = k % 2 == 0 ? byte & 0x0F : byte >> 4;
    const double magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (code & 8 ? -1 : 1) * magnitudes[code & 7] * std::ldexp(1.0, scales[n * nb + k / kMxfp4Block] - 127);
  }
};

// Columns [n0, n1) of every row of y [M, N]; NaN elsewhere.
std::vector<float> Sentinel(const Problem& p) { return std::vector<float>(p.M * p.N, NAN); }

std::vector<float> RunReference(const Problem& p, bool bias, int64_t n0, int64_t n1) {
  std::vector<float> y = Sentinel(p);
  GemvMxfp4Reference(p.x.data(), p.M, p.Matrix(bias), n0, n1, y.data(), p.N);
  return y;
}

std::vector<float> RunFma(const Problem& p, GemvIsa isa, bool bias, int64_t n0, int64_t n1) {
  std::vector<float> xp(p.M * p.K), y = Sentinel(p);
  PackRowsMxfp4(p.x.data(), p.M, p.K, xp.data());
  GemvMxfp4Fma(xp.data(), p.M, p.Matrix(bias), n0, n1, y.data(), p.N, isa);
  return y;
}

struct QuantizedX {
  std::vector<int8_t> plain, packed;
  std::vector<float> scales;
};

QuantizedX Quantize(const Problem& p) {
  QuantizedX q{std::vector<int8_t>(p.M * p.K), std::vector<int8_t>(p.M * p.K), std::vector<float>(p.M * p.nb)};
  QuantizeRowsQ8(p.x.data(), p.M, p.K, q.plain.data(), q.scales.data());
  std::vector<float> packed_scales(p.M * p.nb);
  QuantizeRowsMxfp4(p.x.data(), p.M, p.K, q.packed.data(), packed_scales.data());
  EXPECT_EQ(std::memcmp(packed_scales.data(), q.scales.data(), packed_scales.size() * 4), 0);
  return q;
}

std::vector<float> RunDotReference(const Problem& p, bool bias, int64_t n0, int64_t n1) {
  const QuantizedX q = Quantize(p);
  std::vector<float> y = Sentinel(p);
  GemvMxfp4DotReference(q.plain.data(), q.scales.data(), p.M, p.Matrix(bias), n0, n1, y.data(), p.N);
  return y;
}

std::vector<float> RunDot(const Problem& p, GemvIsa isa, bool bias, int64_t n0, int64_t n1) {
  const QuantizedX q = Quantize(p);
  std::vector<float> y = Sentinel(p);
  GemvMxfp4Dot(q.packed.data(), q.scales.data(), p.M, p.Matrix(bias), n0, n1, y.data(), p.N, isa);
  return y;
}

using testing::ExpectSame;  // mxfp4_test_util.h

// 1, 2, 3, 5 blocks (odd counts: the AVX-512 dot's lone last block), 768, and
// gpt-oss's 2880 (90 blocks).
const int64_t kKs[] = {32, 64, 96, 160, 768, 2880};
int64_t NFor(int64_t K) { return K >= 768 ? 13 : 37; }

// ---------------------------------------------------------------- tables

TEST(Mxfp4Test, Fp4CodesAndE8m0ScalesAreExact) {
  const float values[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(std::memcmp(&kFp4Values[c], &values[c], 4), 0) << "code " << c;  // -0 for code 8
    EXPECT_EQ(kFp4Doubled[c], 2 * values[c]) << "code " << c;
  }
  const float* table = E8m0Table();
  for (int s = 0; s < 255; ++s) {
    EXPECT_EQ(static_cast<double>(E8m0Value(static_cast<uint8_t>(s))), std::ldexp(1.0, s - 127)) << s;
    EXPECT_EQ(table[s], E8m0Value(static_cast<uint8_t>(s))) << s;
    EXPECT_EQ(static_cast<double>(table[256 + s]), std::ldexp(1.0, s - 128)) << s;
  }
  EXPECT_EQ(std::fpclassify(E8m0Value(0)), FP_SUBNORMAL);
  EXPECT_EQ(E8m0Value(127), 1.0f);
  EXPECT_TRUE(std::isnan(E8m0Value(255)));
  EXPECT_TRUE(std::isnan(table[255]));
  EXPECT_TRUE(std::isnan(table[256 + 255]));
}

// ------------------------------------------------------------ nibble order

// Two hand-written blocks of one row. Block 0, scale 128 (x2): bytes 0x10,
// 0x32, ..: byte j = code 2j in its low nibble, 2j+1 in its high one, so
// elements 0..15 are codes 0..15 in order; bytes 8..15 swap the pair.
// Block 1, scale 125 (x1/4): a few codes at known places.
const uint8_t kHandBlocks[32] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,  // block 0
                                 0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF,  //
                                 0x07, 0xF0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // block 1
                                 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9A};
const uint8_t kHandScales[2] = {128, 125};
// The 64 values, written out by hand.
const float kHandValues[64] = {
    // block 0 (x2)
    0, 1, 2, 3, 4, 6, 8, 12, -0.0f, -1, -2, -3, -4, -6, -8, -12,  //
    1, 0, 3, 2, 6, 4, 12, 8, -1, -0.0f, -3, -2, -6, -4, -12, -8,  //
    // block 1 (x1/4): byte 0 = 0x07 (code 7 = 6, code 0), byte 1 = 0xF0
    // (code 0, code 15 = -6), byte 15 = 0x9A (code 10 = -1, code 9 = -0.5)
    1.5, 0, 0, -1.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0.25, -0.125};

Mxfp4Matrix HandMatrix() { return {kHandBlocks, kHandScales, nullptr, 64}; }

TEST(Mxfp4Test, NibbleOrderAndScalesOnHandWrittenBlocks) {
  std::vector<float> w(64);
  DequantizeRowMxfp4(HandMatrix(), 0, w.data());
  for (int k = 0; k < 64; ++k) {
    EXPECT_EQ(std::memcmp(&w[k], &kHandValues[k], 4), 0) << "element " << k << ": " << w[k] << " vs " << kHandValues[k];
  }
  // The references with x = a unit vector (the dot's: 127 with d_x = 1) read
  // back one element each.
  for (int k = 0; k < 64; ++k) {
    std::vector<float> x(64, 0.0f);
    x[k] = 1.0f;
    float y = NAN;
    GemvMxfp4Reference(x.data(), 1, HandMatrix(), 0, 1, &y, 1);
    EXPECT_EQ(y, kHandValues[k]) << "fma reference, element " << k;
    std::vector<int8_t> xq(64, 0);
    xq[k] = 127;
    const float xs[2] = {1.0f, 1.0f};
    GemvMxfp4DotReference(xq.data(), xs, 1, HandMatrix(), 0, 1, &y, 1);
    EXPECT_EQ(y, 127.0f * kHandValues[k]) << "dot reference, element " << k;
  }
}

// PackRowsMxfp4: per block the 16 even elements, then the 16 odd ones;
// QuantizeRowsMxfp4: QuantizeRowsQ8's bytes in that order.
TEST(Mxfp4Test, PackedOrderIsEvensThenOddsPerBlock) {
  const int64_t M = 2, K = 96;
  std::vector<float> x(M * K), xp(M * K);
  for (int64_t i = 0; i < M * K; ++i) x[i] = static_cast<float>(i);
  PackRowsMxfp4(x.data(), M, K, xp.data());
  for (int64_t i = 0; i < M * K; ++i) {
    const int64_t block = i / 32, j = i % 32;
    EXPECT_EQ(xp[i], static_cast<float>(block * 32 + (j < 16 ? 2 * j : 2 * (j - 16) + 1))) << i;
  }
  const Problem p(M, K, 1, 3);
  const QuantizedX q = Quantize(p);
  for (int64_t i = 0; i < M * K; ++i) {
    const int64_t block = i / 32, j = i % 32;
    EXPECT_EQ(q.packed[i], q.plain[block * 32 + (j < 16 ? 2 * j : 2 * (j - 16) + 1)]) << i;
  }
}

// ------------------------------------------------------ references vs exact

// The fp32-x reference: the exact sum in double within fp32 rounding (a lane
// adds nb block terms of 2 products each, then 4 levels of reduction and
// the bias): (nb + 8) * 2^-24 * (sum |w x| + |bias|).
TEST(Mxfp4Test, ReferenceIsTheExactProductWithinFp32Rounding) {
  const Draw draws[] = {{117, 137, 0}, {0, 2, 100}, {252, 254, -100}};  // subnormal scales, the largest
  for (const Draw& draw : draws) {
    for (int64_t K : kKs) {
      Problem p(2, K, NFor(K), static_cast<uint32_t>(K + draw.lo), draw);
      if (draw.lo >= 252) {
        for (uint8_t& b : p.blocks) b &= 0xBB;  // codes 0-3, 8-11: |v| <= 1.5, so 1.5 * 2^127 stays finite
      }
      const std::vector<float> y = RunReference(p, true, 0, p.N);
      for (int64_t m = 0; m < p.M; ++m) {
        for (int64_t n = 0; n < p.N; ++n) {
          double exact = p.bias[n], size = std::abs(p.bias[n]);
          for (int64_t k = 0; k < K; ++k) {
            exact += p.Weight(n, k) * p.x[m * K + k];
            size += std::abs(p.Weight(n, k) * p.x[m * K + k]);
          }
          ASSERT_TRUE(std::isfinite(y[m * p.N + n]));
          EXPECT_LE(std::abs(y[m * p.N + n] - exact), (p.nb + 8) * std::ldexp(size, -24))
              << "K=" << K << " scales " << draw.lo << ".." << draw.hi << " m=" << m << " n=" << n;
        }
      }
    }
  }
}

// The int8-x reference: x's rounding (QuantizeRowsQ8: per block at most
// half a step, d_x / 2 = max|x_block| / 254, per value; 2^-20 of slack for
// the reciprocal) times |w|, plus fp32 rounding as above, of the exact
// product with fp32 x.
TEST(Mxfp4Test, DotReferenceIsTheExactProductWithinXRounding) {
  for (int64_t K : kKs) {
    const Problem p(3, K, NFor(K), static_cast<uint32_t>(K * 3));
    const QuantizedX q = Quantize(p);
    const std::vector<float> y = RunDotReference(p, true, 0, p.N);
    for (int64_t m = 0; m < p.M; ++m) {
      for (int64_t n = 0; n < p.N; ++n) {
        double exact = p.bias[n], x_rounding = 0, size = std::abs(p.bias[n]);
        for (int64_t k = 0; k < K; ++k) {
          const double w = p.Weight(n, k), d = q.scales[m * p.nb + k / kMxfp4Block];
          exact += w * p.x[m * K + k];
          x_rounding += std::abs(w) * d * (0.5 + std::ldexp(1.0, -20));
          size += std::abs(w * q.plain[m * K + k] * d);
        }
        EXPECT_LE(std::abs(y[m * p.N + n] - exact), x_rounding + (p.nb + 8) * std::ldexp(size, -24))
            << "K=" << K << " m=" << m << " n=" << n;
      }
    }
  }
}

// ---------------------------------------------------------- per-ISA builds

struct Build {
  GemvIsa isa;
  bool dot;
};

std::string BuildName(const Build& b) {
  return b.isa == GemvIsa::kAvx2 ? "Avx2" : b.dot ? "Avx512Vnni" : "Avx512";
}

// Why this CPU cannot run the build, or "" when it can.
std::string Missing(const Build& b) {
  if (!Mxfp4Available()) return "this CPU lacks AVX2/FMA";
  if (b.isa == GemvIsa::kAvx2) return "";
  if (b.dot) return Mxfp4DotAvx512Available() ? "" : "this CPU lacks AVX-512 F/BW/VL + VNNI";
  return Mxfp4FmaAvx512Available() ? "" : "this CPU lacks AVX-512F";
}

// The cases run once per kernel and build: Avx2/Mxfp4IsaTest.*/Fma,
// Avx2/Mxfp4IsaTest.*/Dot, Avx512/Mxfp4IsaTest.*/Fma (AVX-512F) and
// Avx512Vnni/Mxfp4IsaTest.*/Dot (AVX-512 F/BW/VL + VNNI).
class Mxfp4IsaTest : public ::testing::TestWithParam<Build> {
 protected:
  void SetUp() override {
    const std::string missing = Missing(GetParam());
    if (!missing.empty()) GTEST_SKIP() << missing;
  }
  // The kernel under test and its reference, on p's columns [n0, n1).
  std::vector<float> Run(const Problem& p, bool bias, int64_t n0, int64_t n1) const {
    return GetParam().dot ? RunDot(p, GetParam().isa, bias, n0, n1) : RunFma(p, GetParam().isa, bias, n0, n1);
  }
  std::vector<float> Reference(const Problem& p, bool bias, int64_t n0, int64_t n1) const {
    return GetParam().dot ? RunDotReference(p, bias, n0, n1) : RunReference(p, bias, n0, n1);
  }
  std::string What(const Problem& p, bool bias, int64_t n0, int64_t n1) const {
    return BuildName(GetParam()) + (GetParam().dot ? " dot" : " fma") + " K=" + std::to_string(p.K) +
           " N=" + std::to_string(p.N) + " M=" + std::to_string(p.M) + " bias=" + std::to_string(bias) +
           " n=[" + std::to_string(n0) + "," + std::to_string(n1) + ")";
  }
};
TEST_P(Mxfp4IsaTest, MatchesReferenceBitForBit) {
  for (int64_t K : kKs) {
    for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
      const Problem p(M, K, NFor(K), static_cast<uint32_t>(K * 5 + M));
      for (bool bias : {false, true}) {
        const int64_t n0 = 1, n1 = p.N - 2;  // odd ends: every row grouping and its remainder
        ExpectSame(Run(p, bias, n0, n1), Reference(p, bias, n0, n1), What(p, bias, n0, n1));
      }
    }
  }
}

// Every scale byte 0..254 over the blocks (5 a row, in order: rows of
// subnormal, ordinary, overflowing weights), with x ~ N(0, 1) and x / 2^100.
TEST_P(Mxfp4IsaTest, EveryScaleByteMatchesReference) {
  for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
    Problem p(M, 160, 51, static_cast<uint32_t>(M + 7));
    for (size_t i = 0; i < p.scales.size(); ++i) p.scales[i] = static_cast<uint8_t>(i % 255);
    ExpectSame(Run(p, true, 0, p.N), Reference(p, true, 0, p.N), What(p, true, 0, p.N));
    for (float& v : p.x) v = std::ldexp(v, -100);
    ExpectSame(Run(p, false, 0, p.N), Reference(p, false, 0, p.N), What(p, false, 0, p.N) + " x/2^100");
  }
}

// A 255 (NaN) scale: the outputs of its row are NaN, every other one the
// reference's bits.
TEST_P(Mxfp4IsaTest, NanScaleReachesOnlyItsRow) {
  for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
    Problem p(M, 96, 9, static_cast<uint32_t>(M + 11));
    p.scales[4 * p.nb + 1] = 255;
    const std::vector<float> y = Run(p, true, 0, p.N);
    ExpectSame(y, Reference(p, true, 0, p.N), What(p, true, 0, p.N));
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < p.N; ++n) EXPECT_EQ(std::isnan(y[m * p.N + n]), n == 4) << m << "," << n;
    }
  }
}

// The hand-written blocks through the kernel: x a unit vector reads one
// element (dot: x = 127, so that d_x = 1 and y = 127 w exactly).
TEST_P(Mxfp4IsaTest, HandWrittenBlocksReadBackByUnitVectors) {
  Problem p(kGemvMaxRows, 64, 1, 1);
  std::memcpy(p.blocks.data(), kHandBlocks, 32);
  std::memcpy(p.scales.data(), kHandScales, 2);
  const float one = GetParam().dot ? 127.0f : 1.0f;
  for (int k0 = 0; k0 < 64; k0 += kGemvMaxRows) {
    std::fill(p.x.begin(), p.x.end(), 0.0f);
    for (int m = 0; m < kGemvMaxRows; ++m) p.x[m * 64 + k0 + m] = one;
    const std::vector<float> y = Run(p, false, 0, 1);
    for (int m = 0; m < kGemvMaxRows; ++m) {
      EXPECT_EQ(y[m], one * kHandValues[k0 + m]) << BuildName(GetParam()) << " element " << k0 + m;
    }
  }
}

void PrintTo(const Build& b, std::ostream* os) { *os << BuildName(b) << (b.dot ? " dot" : " fma"); }

std::string KernelName(const ::testing::TestParamInfo<Build>& info) { return info.param.dot ? "Dot" : "Fma"; }

INSTANTIATE_TEST_SUITE_P(Avx2, Mxfp4IsaTest,
                         ::testing::Values(Build{GemvIsa::kAvx2, false}, Build{GemvIsa::kAvx2, true}), KernelName);
INSTANTIATE_TEST_SUITE_P(Avx512, Mxfp4IsaTest, ::testing::Values(Build{GemvIsa::kAvx512, false}), KernelName);
INSTANTIATE_TEST_SUITE_P(Avx512Vnni, Mxfp4IsaTest, ::testing::Values(Build{GemvIsa::kAvx512, true}), KernelName);

// ----------------------------------------------------- AVX-512 == AVX2 bits

void ExpectAvx512GivesAvx2Bits(bool dot) {
  for (int64_t K : kKs) {
    for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
      const Problem p(M, K, NFor(K) + 8, static_cast<uint32_t>(K * 7 + M));
      for (int64_t n0 : {0, 1, 5}) {
        auto run = [&](GemvIsa isa) { return dot ? RunDot(p, isa, true, n0, p.N) : RunFma(p, isa, true, n0, p.N); };
        const std::vector<float> a = run(GemvIsa::kAvx2), b = run(GemvIsa::kAvx512);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "K=" << K << " M=" << M << " n0=" << n0;
      }
    }
  }
}

TEST(Mxfp4Test, Avx512FmaGivesAvx2Bits) {
  const std::string missing = Missing({GemvIsa::kAvx512, false});
  if (!missing.empty()) GTEST_SKIP() << missing;
  ExpectAvx512GivesAvx2Bits(false);
}

TEST(Mxfp4Test, Avx512VnniDotGivesAvx2Bits) {
  const std::string missing = Missing({GemvIsa::kAvx512, true});
  if (!missing.empty()) GTEST_SKIP() << missing;
  ExpectAvx512GivesAvx2Bits(true);
}

// ---------------------------------------------------------------- dispatch

TEST(Mxfp4Test, DefaultBuildsFollowTheCpuAndPdserveIsa) {
  const char* forced = std::getenv("PDSERVE_ISA");
  const bool avx2_only = forced != nullptr && std::strcmp(forced, "avx2") == 0;
  EXPECT_EQ(GemvMxfp4FmaIsa(), !avx2_only && Mxfp4FmaAvx512Available() ? GemvIsa::kAvx512 : GemvIsa::kAvx2);
  EXPECT_EQ(GemvMxfp4DotIsa(), !avx2_only && Mxfp4DotAvx512Available() ? GemvIsa::kAvx512 : GemvIsa::kAvx2);
  const std::string fma = Mxfp4KernelName(Mxfp4Kernel::kFma), dot = Mxfp4KernelName(Mxfp4Kernel::kDot);
  if (!Mxfp4Available()) {
    EXPECT_EQ(fma, "fma scalar");
    EXPECT_EQ(dot, "dot scalar");
  } else {
    EXPECT_EQ(fma, GemvMxfp4FmaIsa() == GemvIsa::kAvx512 ? "fma avx512" : "fma avx2");
    EXPECT_EQ(dot, GemvMxfp4DotIsa() == GemvIsa::kAvx512 ? "dot avx512-vnni" : "dot avx2");
  }
  std::printf("mxfp4 kernels here: %s, %s\n", fma.c_str(), dot.c_str());
  // Without `isa`: the reference's bits whichever build (or the scalar path) runs.
  const Problem p(3, 160, 11, 21);
  std::vector<float> xp(p.M * p.K), y = Sentinel(p);
  PackRowsMxfp4(p.x.data(), p.M, p.K, xp.data());
  GemvMxfp4Fma(xp.data(), p.M, p.Matrix(true), 0, p.N, y.data(), p.N);
  ExpectSame(y, RunReference(p, true, 0, p.N), "default fma");
  const QuantizedX q = Quantize(p);
  GemvMxfp4Dot(q.packed.data(), q.scales.data(), p.M, p.Matrix(true), 0, p.N, y.data(), p.N);
  ExpectSame(y, RunDotReference(p, true, 0, p.N), "default dot");
}

}  // namespace
}  // namespace pdserve
