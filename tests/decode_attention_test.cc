// The split-K decode attention kernel (common/kernels/decode_attention.h)
// against a plain double-precision reference, for fp32 and bf16 K/V, at
// lengths around the split size (bf16 rows of d = 32, 48, 64 and 96 read in
// pairs, d = 44 widened one vector at a time); and its AVX-512 build against
// the AVX2 baseline where the CPU has AVX-512.
#include "common/kernels/decode_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

uint16_t ToBf16(float f) {  // truncation: any bf16 value will do as input
  return static_cast<uint16_t>(testing::FloatBits(f) >> 16);
}

using testing::Bf16ToFloat;

struct Case {
  DecodeAttnShape shape;
  int64_t rows = 0;
  std::vector<float> q, sinks, k, v;  // k, v as fp32 (already bf16-exact when shape.bf16)
  std::vector<uint16_t> k16, v16;

  Case(DecodeAttnShape s, int64_t n, uint32_t seed, float q_scale = 2.0f) : shape(s), rows(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int64_t H = s.n_heads, K = s.n_kv_heads, d = s.head_dim;
    for (int64_t i = 0; i < H * d; ++i) q.push_back(q_scale * dist(rng));  // peaked softmax too
    for (int64_t i = 0; i < H; ++i) sinks.push_back(dist(rng));
    for (int64_t i = 0; i < n * K * d; ++i) {
      k.push_back(dist(rng));
      v.push_back(dist(rng));
      if (s.bf16) {
        k16.push_back(ToBf16(k.back()));
        v16.push_back(ToBf16(v.back()));
        k.back() = Bf16ToFloat(k16.back());
        v.back() = Bf16ToFloat(v16.back());
      }
    }
  }

  DecodeAttnRows Rows() const {
    if (shape.bf16) return {k16.data(), v16.data(), rows};
    return {k.data(), v.data(), rows};
  }

  // softmax(q_h . k_j / sqrt(d) ++ sink_h) . v, in double.
  std::vector<float> Reference() const {
    const int64_t H = shape.n_heads, K = shape.n_kv_heads, d = shape.head_dim, rep = H / K;
    std::vector<float> out(H * d);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / rep;
      std::vector<double> s(rows);
      double m = sinks[h];
      for (int64_t j = 0; j < rows; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += double{q[h * d + i]} * k[(j * K + kvh) * d + i];
        s[j] = dot / std::sqrt(static_cast<double>(d));
        m = std::max(m, s[j]);
      }
      double total = std::exp(sinks[h] - m);
      for (int64_t j = 0; j < rows; ++j) total += (s[j] = std::exp(s[j] - m));
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < rows; ++j) acc += s[j] * v[(j * K + kvh) * d + i];
        out[h * d + i] = static_cast<float>(acc / total);
      }
    }
    return out;
  }

  std::vector<float> Kernel(DecodeAttnIsa isa) const {
    std::vector<float> out(shape.n_heads * shape.head_dim, -1.0f);
    std::vector<float> scratch(DecodeAttnScratchFloats(shape) +
                               DecodeAttnSplits(rows) * DecodeAttnPartialFloats(shape));
    DecodeAttention(q.data(), Rows(), shape, sinks.data(), scratch.data(), out.data(), isa);
    return out;
  }
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double{got[i]} - want[i]));
  EXPECT_LE(worst, tol) << what;
}

// Lengths: one row, a few, less than a split (the window), exactly one split, one past it, several splits with a ragged end.
const int64_t kLengths[] = {1, 5, 100, kDecodeSplitRows, kDecodeSplitRows + 1, 3 * kDecodeSplitRows + 77};
// The 502M model's shape; one whose d leaves vector tails (scores one row at a time); and 3, 4 and 5
// query heads per KV head with d a whole number of vectors (the 4-row score blocks, the heads of a
// group in one chunk or several: at most 4 per chunk on AVX-512, 2 on AVX2).
const DecodeAttnShape kShapes[] = {
    {8, 4, 96, false}, {6, 2, 44, false}, {6, 2, 48, false}, {12, 3, 32, false}, {10, 2, 64, false}};

void CheckAgainstReference(DecodeAttnIsa isa) {
  for (DecodeAttnShape shape : kShapes) {
    for (bool bf16 : {false, true}) {
      shape.bf16 = bf16;
      for (int64_t n : kLengths) {
        const Case c(shape, n, static_cast<uint32_t>(n * 31 + shape.head_dim + bf16));
        ExpectNear(c.Kernel(isa), c.Reference(), 2e-5,
                   std::string(DecodeAttnIsaName(isa)) + (bf16 ? " bf16" : " f32") + " d=" +
                       std::to_string(shape.head_dim) + " rows=" + std::to_string(n));
      }
    }
  }
}

TEST(DecodeAttentionTest, SplitKMatchesReferenceAvx2) {
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  CheckAgainstReference(DecodeAttnIsa::kAvx2);
}

TEST(DecodeAttentionTest, SplitKMatchesReferenceAvx512) {
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512F";
  CheckAgainstReference(DecodeAttnIsa::kAvx512);
}

// The AVX-512 build and the AVX2 baseline differ only in summation order.
TEST(DecodeAttentionTest, Avx512MatchesAvx2) {
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512F";
  for (bool bf16 : {false, true}) {
    const Case c({8, 4, 96, bf16}, 2 * kDecodeSplitRows + 3, 7);
    ExpectNear(c.Kernel(DecodeAttnIsa::kAvx512), c.Kernel(DecodeAttnIsa::kAvx2), 1e-5, bf16 ? "bf16" : "f32");
  }
}

// Scores hundreds apart: the softmax's exponent goes far below where e^x underflows (the kernel's
// vector exp clamps there), and the result is still the (near one-hot) reference.
void CheckScoresFarApart(DecodeAttnIsa isa) {
  for (bool bf16 : {false, true}) {
    const Case c({8, 4, 96, bf16}, kDecodeSplitRows + 40, 11, /*q_scale=*/100.0f);
    ExpectNear(c.Kernel(isa), c.Reference(), 2e-5, std::string(DecodeAttnIsaName(isa)) + (bf16 ? " bf16" : " f32"));
  }
}

TEST(DecodeAttentionTest, ScoresFarApartMatchReferenceAvx2) {
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  CheckScoresFarApart(DecodeAttnIsa::kAvx2);
}

TEST(DecodeAttentionTest, ScoresFarApartMatchReferenceAvx512) {
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512F";
  CheckScoresFarApart(DecodeAttnIsa::kAvx512);
}

// A split's partial is its own rows' (max, sum of exp, weighted values).
TEST(DecodeAttentionTest, SplitPartialHoldsMaxSumAndWeightedValues) {
  if (!GemvAvailable()) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  const Case c({2, 1, 16, false}, kDecodeSplitRows + 3, 3);
  std::vector<float> scratch(DecodeAttnScratchFloats(c.shape)), part(DecodeAttnPartialFloats(c.shape));
  DecodeAttentionSplit(c.q.data(), c.Rows(), c.shape, 1, scratch.data(), part.data());
  for (int64_t g = 0; g < 2; ++g) {
    std::vector<double> s;
    for (int64_t j = kDecodeSplitRows; j < c.rows; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < 16; ++i) dot += double{c.q[g * 16 + i]} * c.k[j * 16 + i];
      s.push_back(dot / 4.0);
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0, v0 = 0;
    for (size_t j = 0; j < s.size(); ++j) {
      sum += std::exp(s[j] - m);
      v0 += std::exp(s[j] - m) * c.v[(kDecodeSplitRows + j) * 16];
    }
    const float* p = part.data() + g * 18;
    EXPECT_NEAR(p[0], m, 1e-5);
    EXPECT_NEAR(p[1], sum, 1e-5 * sum);
    EXPECT_NEAR(p[2], v0, 1e-5 * sum);
  }
}

// Prefetching the next split's rows (a caller that runs it next) changes no bit of a split's partial,
// whether the next split is whole, ragged, or absent.
void CheckPrefetchChangesNoBits(DecodeAttnIsa isa) {
  for (bool bf16 : {false, true}) {
    const Case c({8, 4, 96, bf16}, 2 * kDecodeSplitRows + 37, 5);
    std::vector<float> scratch(DecodeAttnScratchFloats(c.shape));
    for (int64_t split = 0; split < DecodeAttnSplits(c.rows); ++split) {
      std::vector<float> plain(DecodeAttnPartialFloats(c.shape)), prefetched(plain.size());
      DecodeAttentionSplit(c.q.data(), c.Rows(), c.shape, split, scratch.data(), plain.data(), isa, false);
      DecodeAttentionSplit(c.q.data(), c.Rows(), c.shape, split, scratch.data(), prefetched.data(), isa, true);
      EXPECT_EQ(plain, prefetched) << DecodeAttnIsaName(isa) << (bf16 ? " bf16" : " f32") << " split " << split;
    }
  }
}

TEST(DecodeAttentionTest, PrefetchNextChangesNoBitsAvx2) {
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  CheckPrefetchChangesNoBits(DecodeAttnIsa::kAvx2);
}

TEST(DecodeAttentionTest, PrefetchNextChangesNoBitsAvx512) {
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512F";
  CheckPrefetchChangesNoBits(DecodeAttnIsa::kAvx512);
}

TEST(DecodeAttentionTest, NoRowsGiveZeros) {
  const DecodeAttnShape shape{2, 1, 8, false};
  std::vector<float> out(16, 5.0f);
  const float sinks[2] = {0.0f, 1.0f};
  DecodeAttentionMerge(nullptr, 0, shape, sinks, out.data());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace pdserve
