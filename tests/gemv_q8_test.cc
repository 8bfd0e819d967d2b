// The int8-dot decode kernel (gemv_q8.h's GemvQ8Dot, Q8_0 weights against
// Q8_0-quantized x), each build (AVX2, AVX-512 VNNI) against a double
// reference of the same math (exact integer block dots, so the bound is
// fp32 rounding only), with odd block counts, every row count up to
// kGemvMaxRows and odd column ranges; the extreme int8 values; the VNNI
// build gives the AVX2 build's bits exactly; a row's result does not depend
// on the rows sharing its pass (batch invariance). One case tests one ISA
// (Avx2/..., Avx512/...): the VNNI cases skip with GTEST_SKIP, and their
// reason, on a CPU without AVX-512 VNNI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8.h"

namespace pdserve {
namespace {

// A normal fp16's value (the test's scales are all normal).
double HalfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  return (h & 0x8000 ? -1.0 : 1.0) * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

struct Problem {
  int64_t M, K, N, nb;
  std::vector<int8_t> xq;
  std::vector<float> xs;
  std::vector<uint8_t> w;  // Q8_0

  // Random int8 in [-127, 127] (`extreme`: only +-127) and scales.
  Problem(int64_t m, int64_t k, int64_t n, uint32_t seed, bool extreme = false)
      : M(m), K(k), N(n), nb(k / kQ8Block), w(n * Q8RowBytes(k)) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> q(-127, 127), sign(0, 1);
    std::uniform_int_distribution<uint16_t> half(0x1c00, 0x2bff);  // 2^-8 .. 2^-4
    std::uniform_real_distribution<float> scale(1e-3f, 1e-1f);
    auto value = [&] { return static_cast<int8_t>(extreme ? (sign(rng) ? 127 : -127) : q(rng)); };
    for (int64_t i = 0; i < M * K; ++i) xq.push_back(value());
    for (int64_t i = 0; i < M * nb; ++i) xs.push_back(scale(rng));
    for (int64_t b = 0; b < N * nb; ++b) {
      uint8_t* blk = w.data() + b * kQ8BlockBytes;
      const uint16_t d = half(rng);
      std::memcpy(blk, &d, 2);
      for (int64_t i = 0; i < kQ8Block; ++i) blk[2 + i] = static_cast<uint8_t>(value());
    }
  }
  // sum_b (sum_i xq * wq) * d_w * d_x in double, and the sum of |terms| as
  // the kernels form them (sums of 4 products, times d_w * d_x).
  void Reference(int64_t m, int64_t n, double* y, double* scale) const {
    *y = *scale = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w.data() + n * Q8RowBytes(K) + b * kQ8BlockBytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const double d = HalfValue(h) * xs[m * nb + b];
      for (int64_t i = 0; i < kQ8Block; i += 4) {
        int64_t dot4 = 0;
        for (int64_t j = i; j < i + 4; ++j) {
          dot4 += int64_t{xq[m * K + b * kQ8Block + j]} * static_cast<int8_t>(blk[2 + j]);
        }
        *y += dot4 * d;
        *scale += std::abs(dot4 * d);
      }
    }
  }
  // Columns [n0, n1) of rows [m0, m0 + rows), written into y [M, N] (NaN elsewhere).
  std::vector<float> Run(GemvIsa isa, int64_t m0, int64_t rows, int64_t n0, int64_t n1) const {
    std::vector<float> y(M * N, NAN);
    GemvQ8Dot(xq.data() + m0 * K, xs.data() + m0 * nb, rows, K, w.data(), n0, n1, y.data() + m0 * N, N, isa);
    return y;
  }
};

// 1, 2, 3, 5 blocks (odd counts take the lone-block tail), 768 and 1536 (the 502M's).
const int64_t kKs[] = {32, 64, 96, 160, 768, 1536};
bool Lacks(GemvIsa isa) { return isa == GemvIsa::kAvx512 ? !GemvQ8VnniAvailable() : !GemvQ8Available(); }

// The cases run once per ISA: Avx2/GemvQ8IsaTest.*, Avx512/GemvQ8IsaTest.*.
class GemvQ8IsaTest : public ::testing::TestWithParam<GemvIsa> {
 protected:
  void SetUp() override {
    if (Lacks(GetParam())) {
      GTEST_SKIP() << "this CPU lacks " << (GetParam() == GemvIsa::kAvx512 ? "AVX-512 F/BW/VL + VNNI" : "AVX2/FMA/F16C");
    }
  }
};

TEST_P(GemvQ8IsaTest, MatchesExactBlockDotReference) {
  const GemvIsa isa = GetParam();
  for (bool extreme : {false, true}) {
    for (int64_t K : kKs) {
      for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
        const Problem p(M, K, 11, static_cast<uint32_t>(K * 5 + M), extreme);
        const int64_t n0 = 1;  // an odd start: both row groupings and their remainders
        const std::vector<float> y = p.Run(isa, 0, M, n0, p.N);
        for (int64_t m = 0; m < M; ++m) {
          EXPECT_TRUE(std::isnan(y[m * p.N]));  // nothing outside [n0, N)
          for (int64_t n = n0; n < p.N; ++n) {
            double want = 0, scale = 0;
            p.Reference(m, n, &want, &scale);
            // fp32 roundings on a lane's path: d_w * d_x, nb / 2 FMAs, 4 in the reduction.
            const double bound = (p.nb / 2 + 6) * std::ldexp(1.0, -24) * scale;
            EXPECT_LE(std::abs(y[m * p.N + n] - want), bound)
                << GemvIsaName(isa) << " K=" << K << " M=" << M << " m=" << m << " n=" << n
                << " extreme=" << extreme;
          }
        }
      }
    }
  }
}

TEST_P(GemvQ8IsaTest, RowResultIndependentOfRowsSharingThePass) {
  const GemvIsa isa = GetParam();
  for (int64_t K : {int64_t{96}, int64_t{768}}) {
    const Problem p(kGemvMaxRows, K, 23, static_cast<uint32_t>(K + 1));
    const std::vector<float> all = p.Run(isa, 0, kGemvMaxRows, 0, p.N);
    for (int64_t m = 0; m < kGemvMaxRows; ++m) {
      for (int64_t rows = 1; m + rows <= kGemvMaxRows; ++rows) {
        const std::vector<float> part = p.Run(isa, m, rows, 3, 21);
        for (int64_t n = 3; n < 21; ++n) {
          ASSERT_EQ(std::memcmp(&all[m * p.N + n], &part[m * p.N + n], 4), 0)
              << GemvIsaName(isa) << " K=" << K << " row " << m << " in a pass of " << rows << ", n=" << n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Avx2, GemvQ8IsaTest, ::testing::Values(GemvIsa::kAvx2),
                         [](const ::testing::TestParamInfo<GemvIsa>&) { return std::string("Avx2"); });
INSTANTIATE_TEST_SUITE_P(Avx512, GemvQ8IsaTest, ::testing::Values(GemvIsa::kAvx512),
                         [](const ::testing::TestParamInfo<GemvIsa>&) { return std::string("Avx512"); });

TEST(GemvQ8Test, Avx512VnniGivesAvx2Bits) {
  if (Lacks(GemvIsa::kAvx512)) GTEST_SKIP() << "this CPU lacks AVX-512 F/BW/VL + VNNI";
  for (int64_t K : kKs) {
    for (int64_t M = 1; M <= kGemvMaxRows; ++M) {
      const Problem p(M, K, 37, static_cast<uint32_t>(K * 7 + M));
      for (int64_t n0 : {0, 1, 5}) {
        const std::vector<float> a = p.Run(GemvIsa::kAvx2, 0, M, n0, p.N);
        const std::vector<float> b = p.Run(GemvIsa::kAvx512, 0, M, n0, p.N);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "K=" << K << " M=" << M << " n0=" << n0;
      }
    }
  }
}

// QuantizeRowsQ8 then GemvQ8Dot against fp32 x: within the activations'
// rounding (half a step of max|x|/127 per value).
TEST(GemvQ8Test, QuantizedXFollowsFloatX) {
  if (Lacks(GemvIsa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const int64_t M = 3, K = 160, N = 9, nb = K / kQ8Block;
  Problem p(1, K, N, 99);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(M * K);
  for (float& v : x) v = dist(rng);
  std::fill(x.begin() + K, x.begin() + K + kQ8Block, 0.0f);  // an all-zero block
  std::vector<int8_t> xq(M * K);
  std::vector<float> xs(M * nb);
  QuantizeRowsQ8(x.data(), M, K, xq.data(), xs.data());
  EXPECT_EQ(xs[nb], 0.0f);
  std::vector<float> y(M * N);
  GemvQ8Dot(xq.data(), xs.data(), M, K, p.w.data(), 0, N, y.data(), N);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double want = 0, bound = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = p.w.data() + n * Q8RowBytes(K) + b * kQ8BlockBytes;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        for (int64_t i = 0; i < kQ8Block; ++i) {
          const double wv = HalfValue(h) * static_cast<int8_t>(blk[2 + i]);
          want += wv * x[m * K + b * kQ8Block + i];
          bound += std::abs(wv) * (0.5 * xs[m * nb + b] + 1e-6);
        }
      }
      EXPECT_LE(std::abs(y[m * N + n] - want), bound) << "m=" << m << " n=" << n;
    }
  }
}

// max|x| / 127 per block, x / that rounded half to even, an all-zero block
// all zeros; the same bytes as the plain scalar loop.
TEST(GemvQ8Test, QuantizeRowsRoundsHalfToEvenPerBlock) {
  const int64_t M = 2, K = 96, nb = K / kQ8Block;
  std::mt19937 rng(8);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(M * K);
  for (float& v : x) v = dist(rng);
  std::fill(x.begin() + kQ8Block, x.begin() + 2 * kQ8Block, 0.0f);
  const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -126.5f};  // d = 1 in this block
  std::copy(std::begin(ties), std::end(ties), x.begin() + K);
  std::fill(x.begin() + K + 7, x.begin() + K + kQ8Block, 0.25f);
  std::vector<int8_t> xq(M * K);
  std::vector<float> xs(M * nb);
  QuantizeRowsQ8(x.data(), M, K, xq.data(), xs.data());
  EXPECT_EQ(xs[1], 0.0f);
  EXPECT_EQ(xs[nb], 1.0f);
  const int expect_ties[] = {127, 2, -4, 0, 0, 2, -126, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(xq[K + i], expect_ties[i]) << i;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0;
      for (int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(x[m * K + b * kQ8Block + i]));
      const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
      ASSERT_EQ(xs[m * nb + b], d) << m << "," << b;
      for (int64_t i = 0; i < kQ8Block; ++i) {
        const int64_t k = m * K + b * kQ8Block + i;
        ASSERT_EQ(xq[k], static_cast<int8_t>(std::nearbyint(x[k] * id))) << "m=" << m << " k=" << k;
      }
    }
  }
}

TEST(GemvQ8Test, DotIsaIsVnniUnlessForcedOrMissing) {
  const char* forced = std::getenv("PDSERVE_ISA");
  if (forced != nullptr && std::strcmp(forced, "avx2") == 0) {
    EXPECT_EQ(GemvQ8DotIsa(), GemvIsa::kAvx2);
  } else {
    EXPECT_EQ(GemvQ8DotIsa(), GemvQ8VnniAvailable() ? GemvIsa::kAvx512 : GemvIsa::kAvx2);
  }
}

}  // namespace
}  // namespace pdserve
