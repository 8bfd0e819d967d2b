// The k-major int8 decode kernel (common/kernels/gemv_q8_kmajor.h): its pack
// holds the Q8_0 values where the layout says (DequantizeQ8KMajorRow gives
// each row's d * q, padding rows included); GemvQ8KMajorDot's outputs equal,
// bit for bit, the stated chain acc = fma(float(block dot), d_w * d_x, acc)
// over the blocks in order, for every row count up to 16 (each pass shape
// and the chunks past 6 rows), odd column ranges, the extreme int8 values
// and K from one block to the 502M's 1536; nothing outside [n0, n1) is
// written. Both builds (AVX2 and AVX-512 VNNI) are checked against the same
// chain, so they agree bit for bit; each skips, saying so, on a CPU without
// its instructions.
#include "common/kernels/gemv_q8_kmajor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "common/kernels/gemv_q8.h"

namespace pdserve {
namespace {

// Skips the calling test where `isa`'s build cannot run here.
#define SKIP_UNLESS_RUNS(isa)                                                                               \
  if ((isa) == GemvIsa::kAvx2 ? !GemvQ8Available() : !GemvQ8VnniAvailable())                               \
  GTEST_SKIP() << "this CPU lacks " << ((isa) == GemvIsa::kAvx2 ? "AVX2 + FMA + F16C" : "AVX-512 F/BW/VL + VNNI") \
               << ": GemvQ8KMajorDot's " << GemvIsaName(isa) << " build cannot run"

// A normal fp16's value (the test's scales are all normal).
float HalfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  return static_cast<float>((h & 0x8000 ? -1.0 : 1.0) * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15));
}

struct Problem {
  int64_t M, K, N, nb;
  std::vector<int8_t> xq;
  std::vector<float> xs;
  std::vector<uint8_t> w, pack;  // Q8_0 rows; their k-major pack

  // Random int8 in [-127, 127], QuantizeRowsQ8's range (`extreme`: only
  // -127 and 127 in x and w), and scales.
  Problem(int64_t m, int64_t k, int64_t n, uint32_t seed, bool extreme = false)
      : M(m), K(k), N(n), nb(k / kQ8Block), w(n * Q8RowBytes(k)), pack(Q8KMajorBytes(n, k), 0xee) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> q(-127, 127), pick(0, 2);
    std::uniform_int_distribution<uint16_t> half(0x1c00, 0x2bff);  // 2^-8 .. 2^-4
    std::uniform_real_distribution<float> scale(1e-3f, 1e-1f);
    for (int64_t i = 0; i < M * K; ++i) xq.push_back(static_cast<int8_t>(extreme ? (pick(rng) ? 127 : -127) : q(rng)));
    for (int64_t i = 0; i < M * nb; ++i) xs.push_back(scale(rng));
    for (int64_t b = 0; b < N * nb; ++b) {
      uint8_t* blk = w.data() + b * kQ8BlockBytes;
      const uint16_t d = half(rng);
      std::memcpy(blk, &d, 2);
      for (int64_t i = 0; i < kQ8Block; ++i) {
        blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(extreme ? (pick(rng) ? 127 : -127) : q(rng)));
      }
    }
    PackQ8KMajor(w.data(), N, K, 0, (N + 31) / 32, pack.data());
  }
  float Scale(int64_t n, int64_t b) const {
    uint16_t h;
    std::memcpy(&h, w.data() + n * Q8RowBytes(K) + b * kQ8BlockBytes, 2);
    return HalfValue(h);
  }
  int8_t Q(int64_t n, int64_t k) const {
    return static_cast<int8_t>(w[n * Q8RowBytes(K) + k / kQ8Block * kQ8BlockBytes + 2 + k % kQ8Block]);
  }
  // The contract: acc = fma(float(exact block dot), d_w * d_x, acc) from 0, blocks in order.
  float Chain(int64_t m, int64_t n) const {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t dot = 0;
      for (int64_t k = b * kQ8Block; k < (b + 1) * kQ8Block; ++k) dot += int32_t{xq[m * K + k]} * Q(n, k);
      acc = std::fma(static_cast<float>(dot), Scale(n, b) * xs[m * nb + b], acc);
    }
    return acc;
  }
  // Rows [m0, m0 + rows), columns [n0, n1), written into y [M, N] (NaN elsewhere).
  std::vector<float> Run(int64_t m0, int64_t rows, int64_t n0, int64_t n1, GemvIsa isa) const {
    std::vector<float> y(M * N, NAN);
    GemvQ8KMajorDot(xq.data() + m0 * K, xs.data() + m0 * nb, rows, K, pack.data(), N, n0, n1, y.data() + m0 * N,
                    N, isa);
    return y;
  }
};

TEST(GemvQ8KMajorTest, PackHoldsEveryRowsValues) {
  for (int64_t K : {32, 96, 768}) {
    const Problem p(1, K, 37, static_cast<uint32_t>(K));  // 37: a second group of 5 rows and 27 padding rows
    EXPECT_EQ(static_cast<int64_t>(p.pack.size()), 2 * 32 * Q8RowBytes(K));
    std::vector<float> row(K);
    for (int64_t n = 0; n < 64; ++n) {
      DequantizeQ8KMajorRow(p.pack.data(), K, n, row.data());
      for (int64_t k = 0; k < K; ++k) {
        const float want = n < p.N ? p.Scale(n, k / kQ8Block) * p.Q(n, k) : 0.0f;
        ASSERT_EQ(row[k], want) << "K=" << K << " n=" << n << " k=" << k;
      }
    }
  }
}

class GemvQ8KMajorIsaTest : public ::testing::TestWithParam<GemvIsa> {};

TEST_P(GemvQ8KMajorIsaTest, EveryOutputIsTheStatedChain) {
  SKIP_UNLESS_RUNS(GetParam());
  for (bool extreme : {false, true}) {
    for (int64_t K : {32, 64, 160, 768, 1536}) {
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 16}) {
        // 300 outputs: blocks of 4 groups, a block of 2 groups, a lone group, a cut one.
        const Problem p(M, K, 300, static_cast<uint32_t>(K * 17 + M), extreme);
        for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, 300}, {5, 291}, {64, 96}, {33, 34}}) {
          const std::vector<float> y = p.Run(0, M, n0, n1, GetParam());
          for (int64_t m = 0; m < M; ++m) {
            for (int64_t n = 0; n < p.N; ++n) {
              const float got = y[m * p.N + n];
              if (n < n0 || n >= n1) {
                ASSERT_TRUE(std::isnan(got)) << "wrote outside [" << n0 << ", " << n1 << "): m=" << m << " n=" << n;
                continue;
              }
              const float want = p.Chain(m, n);
              ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
                  << "K=" << K << " M=" << M << " m=" << m << " n=" << n << " [" << n0 << ", " << n1
                  << ") extreme=" << extreme << ": " << got << " vs " << want;
            }
          }
        }
      }
    }
  }
}

TEST_P(GemvQ8KMajorIsaTest, EmptyRangesWriteNothing) {
  SKIP_UNLESS_RUNS(GetParam());
  const Problem p(3, 64, 40, 4);
  for (const auto& [M, n0, n1] : {std::tuple<int64_t, int64_t, int64_t>{0, 0, 40}, {3, 7, 7}, {3, 40, 40}}) {
    std::vector<float> y(p.M * p.N, NAN);
    GemvQ8KMajorDot(p.xq.data(), p.xs.data(), M, p.K, p.pack.data(), p.N, n0, n1, y.data(), p.N, GetParam());
    for (float v : y) ASSERT_TRUE(std::isnan(v)) << "M=" << M << " [" << n0 << ", " << n1 << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Builds, GemvQ8KMajorIsaTest, ::testing::Values(GemvIsa::kAvx2, GemvIsa::kAvx512),
                         [](const ::testing::TestParamInfo<GemvIsa>& info) { return GemvIsaName(info.param); });

}  // namespace
}  // namespace pdserve
