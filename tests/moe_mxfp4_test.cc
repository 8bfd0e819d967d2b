// The MXFP4 experts of a gpt-oss layer (common/model/moe_mxfp4.h):
// - MoeMxfp4 against a dense double-precision reference written from
//   docs/model.md ("gpt-oss checkpoints": gate|up rows interleaved, the
//   clamped SwiGLU, down plus bias, the gates' weighted sum in slot order),
//   on random MXFP4 weights dequantized by DequantizeRowMxfp4, with random
//   fp32 biases, E = 4, top_k = 2, D = 64, F = 96, N = 1, 3 and 40 (more
//   rows than one kernel call takes): the fma kernel within fp32 rounding,
//   the dot kernel (x quantized to int8 per block) within a coarser bound;
// - batch invariance: row n's bits are the same in a batch of 40 as alone,
//   for both kernels;
// - ClampedSwigluRow: gate above the limit and up beyond +-limit give
//   exactly the clamped values' results; otherwise the fp32 formula;
// - ParseMxfp4Kernel and the process-wide kernel choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/mxfp4.h"
#include "common/model/moe_mxfp4.h"

namespace pdserve {
namespace {

constexpr int64_t kE = 4, kTopK = 2, kD = 64, kF = 96;

// Restores the default kernel when a case ends, passed or not.
struct KernelGuard {
  explicit KernelGuard(Mxfp4KernelChoice k) { SetMoeMxfp4Kernel(k); }
  ~KernelGuard() { SetMoeMxfp4Kernel(Mxfp4KernelChoice::kFma); }
};

// One layer's experts with storage. gate_up scales are drawn so that the
// pre-activations (rms ~ 23 * 2^(s-127) for h ~ N(0, 1)) land around the
// limit: some clamped, most not; down's scales span a wider range.
struct Layer {
  std::vector<std::vector<uint8_t>> gu_blocks, gu_scales, d_blocks, d_scales;
  std::vector<std::vector<float>> gu_bias, d_bias;
  Mxfp4Experts experts;

  Layer(uint32_t seed, double limit) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255), gu_scale(121, 125), d_scale(118, 130);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    experts.d_model = kD;
    experts.hidden = kF;
    experts.swiglu_limit = limit;
    for (int64_t e = 0; e < kE; ++e) {
      gu_blocks.emplace_back(2 * kF * Mxfp4RowBytes(kD));
      gu_scales.emplace_back(2 * kF * Mxfp4RowScales(kD));
      gu_bias.emplace_back(2 * kF);
      d_blocks.emplace_back(kD * Mxfp4RowBytes(kF));
      d_scales.emplace_back(kD * Mxfp4RowScales(kF));
      d_bias.emplace_back(kD);
      for (uint8_t& b : gu_blocks.back()) b = static_cast<uint8_t>(byte(rng));
      for (uint8_t& s : gu_scales.back()) s = static_cast<uint8_t>(gu_scale(rng));
      for (float& b : gu_bias.back()) b = normal(rng);
      for (uint8_t& b : d_blocks.back()) b = static_cast<uint8_t>(byte(rng));
      for (uint8_t& s : d_scales.back()) s = static_cast<uint8_t>(d_scale(rng));
      for (float& b : d_bias.back()) b = normal(rng);
    }
    for (int64_t e = 0; e < kE; ++e) {
      experts.gate_up.push_back({gu_blocks[e].data(), gu_scales[e].data(), gu_bias[e].data(), kD});
      experts.down.push_back({d_blocks[e].data(), d_scales[e].data(), d_bias[e].data(), kF});
    }
  }
};

// N rows of h ~ N(0, 1); per row top_k distinct experts and gates > 0
// summing to 1 (a softmax over the chosen logits, as the router gives).
struct Batch {
  int64_t N;
  std::vector<float> h, gates;
  std::vector<int64_t> idx;

  Batch(int64_t n, uint32_t seed) : N(n), h(n * kD), gates(n * kTopK), idx(n * kTopK) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : h) v = normal(rng);
    std::vector<int64_t> perm(kE);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t e = 0; e < kE; ++e) perm[e] = e;
      std::shuffle(perm.begin(), perm.end(), rng);
      float sum = 0;
      for (int64_t s = 0; s < kTopK; ++s) {
        idx[r * kTopK + s] = perm[s];
        gates[r * kTopK + s] = std::exp(normal(rng));
        sum += gates[r * kTopK + s];
      }
      for (int64_t s = 0; s < kTopK; ++s) gates[r * kTopK + s] /= sum;
    }
  }
};

// W [rows, K] dense, from DequantizeRowMxfp4 (exact), bias added by the caller.
std::vector<double> Dense(const Mxfp4Matrix& W, int64_t rows) {
  std::vector<float> row(W.K);
  std::vector<double> out(rows * W.K);
  for (int64_t n = 0; n < rows; ++n) {
    DequantizeRowMxfp4(W, n, row.data());
    for (int64_t k = 0; k < W.K; ++k) out[n * W.K + k] = row[k];
  }
  return out;
}

// The layer in double, from the spec.
std::vector<double> Reference(const Layer& layer, const Batch& b) {
  const Mxfp4Experts& ex = layer.experts;
  const double limit = ex.swiglu_limit;
  std::vector<std::vector<double>> gu(kE), dn(kE);
  for (int64_t e = 0; e < kE; ++e) {
    gu[e] = Dense(ex.gate_up[e], 2 * kF);
    dn[e] = Dense(ex.down[e], kD);
  }
  std::vector<double> out(b.N * kD, 0.0), pre(2 * kF), act(kF);
  for (int64_t n = 0; n < b.N; ++n) {
    for (int64_t s = 0; s < kTopK; ++s) {
      const int64_t e = b.idx[n * kTopK + s];
      for (int64_t r = 0; r < 2 * kF; ++r) {
        double acc = ex.gate_up[e].bias[r];
        for (int64_t k = 0; k < kD; ++k) acc += gu[e][r * kD + k] * b.h[n * kD + k];
        pre[r] = acc;
      }
      for (int64_t j = 0; j < kF; ++j) {
        const double g = std::min(pre[2 * j], limit);
        const double u = std::clamp(pre[2 * j + 1], -limit, limit);
        act[j] = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
      }
      for (int64_t r = 0; r < kD; ++r) {
        double acc = ex.down[e].bias[r];
        for (int64_t k = 0; k < kF; ++k) acc += dn[e][r * kF + k] * act[k];
        out[n * kD + r] += static_cast<double>(b.gates[n * kTopK + s]) * acc;
      }
    }
  }
  return out;
}

std::vector<float> RunMoe(const Layer& layer, const Batch& b) {
  std::vector<float> out(b.N * kD, NAN);
  MoeMxfp4(layer.experts, b.h.data(), b.N, b.idx.data(), b.gates.data(), kTopK, out.data());
  return out;
}

// max |got - want| / max |want| over the batch; every output finite.
double RelError(const std::vector<float>& got, const std::vector<double>& want) {
  double max_want = 0, max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "output " << i << " is " << got[i];
    max_want = std::max(max_want, std::abs(want[i]));
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_GT(max_want, 0.0);
  return max_diff / max_want;
}

// The reference's pre-activations really do reach both sides of the
// clamps and stay below them too: otherwise the comparison would not
// exercise ClampedSwigluRow's branches.
TEST(MoeMxfp4, ReferenceExercisesTheClamps) {
  const Layer layer(1, 7.0);
  const Batch b(40, 2);
  int64_t gate_clamped = 0, up_high = 0, up_low = 0, inside = 0;
  const std::vector<double> gu = Dense(layer.experts.gate_up[0], 2 * kF);
  for (int64_t n = 0; n < b.N; ++n) {
    for (int64_t r = 0; r < 2 * kF; ++r) {
      double acc = layer.experts.gate_up[0].bias[r];
      for (int64_t k = 0; k < kD; ++k) acc += gu[r * kD + k] * b.h[n * kD + k];
      if (r % 2 == 0 && acc > 7.0) ++gate_clamped;
      if (r % 2 == 1 && acc > 7.0) ++up_high;
      if (r % 2 == 1 && acc < -7.0) ++up_low;
      if (std::abs(acc) < 7.0) ++inside;
    }
  }
  EXPECT_GT(gate_clamped, 0);
  EXPECT_GT(up_high, 0);
  EXPECT_GT(up_low, 0);
  EXPECT_GT(inside, b.N * kF);  // most are not clamped
}

TEST(MoeMxfp4, FmaMatchesDenseDoubleReference) {
  KernelGuard guard(Mxfp4KernelChoice::kFma);
  for (double limit : {7.0, 4.5}) {
    const Layer layer(11, limit);
    for (int64_t N : {1, 3, 40}) {
      const Batch b(N, static_cast<uint32_t>(100 + N));
      const double err = RelError(RunMoe(layer, b), Reference(layer, b));
      EXPECT_LE(err, 1e-5) << "N " << N << " limit " << limit;
    }
  }
}

TEST(MoeMxfp4, DotMatchesDenseDoubleReferenceLoosely) {
  KernelGuard guard(Mxfp4KernelChoice::kDot);
  ASSERT_EQ(GetMoeMxfp4Kernel(), Mxfp4KernelChoice::kDot);
  const Layer layer(12, 7.0);
  for (int64_t N : {1, 3, 40}) {
    const Batch b(N, static_cast<uint32_t>(200 + N));
    const double err = RelError(RunMoe(layer, b), Reference(layer, b));
    // x and the activations rounded to int8 per block of 32 (a step of
    // max|block| / 127): on 30 random layers of this shape, at most 2.0e-2
    // (this one 1.8e-2); swapping gate and up, 0.5 and more.
    EXPECT_LE(err, 5e-2) << "N " << N;
  }
}

// The dot kernel rounds x to int8: its result must differ from fma's
// somewhere, or SetMoeMxfp4Kernel did not switch anything.
TEST(MoeMxfp4, KernelChoiceChangesTheResult) {
  const Layer layer(13, 7.0);
  const Batch b(40, 300);
  std::vector<float> fma, dot;
  {
    KernelGuard guard(Mxfp4KernelChoice::kFma);
    fma = RunMoe(layer, b);
  }
  {
    KernelGuard guard(Mxfp4KernelChoice::kDot);
    dot = RunMoe(layer, b);
  }
  EXPECT_NE(std::memcmp(fma.data(), dot.data(), fma.size() * sizeof(float)), 0);
  EXPECT_EQ(GetMoeMxfp4Kernel(), Mxfp4KernelChoice::kFma);
}

// Row n alone (N = 1, its own idx and gates) gives the bits it has in a
// batch of 40 where other rows share its experts.
TEST(MoeMxfp4, RowBitsDoNotDependOnTheBatch) {
  for (Mxfp4KernelChoice kernel : {Mxfp4KernelChoice::kFma, Mxfp4KernelChoice::kDot}) {
    KernelGuard guard(kernel);
    const Layer layer(21, 7.0);
    const Batch b(40, 400);
    const std::vector<float> all = RunMoe(layer, b);
    for (int64_t n = 0; n < b.N; ++n) {
      Batch one(1, 0);
      std::copy_n(b.h.begin() + n * kD, kD, one.h.begin());
      std::copy_n(b.idx.begin() + n * kTopK, kTopK, one.idx.begin());
      std::copy_n(b.gates.begin() + n * kTopK, kTopK, one.gates.begin());
      const std::vector<float> alone = RunMoe(layer, one);
      EXPECT_EQ(std::memcmp(alone.data(), all.data() + n * kD, kD * sizeof(float)), 0)
          << "row " << n << " kernel " << (kernel == Mxfp4KernelChoice::kFma ? "fma" : "dot")
          << ": first element alone " << alone[0] << ", in the batch " << all[n * kD];
    }
  }
}

// The same rows in another batch order, and the same row twice: the bits follow the row.
TEST(MoeMxfp4, RowBitsDoNotDependOnPositionInTheBatch) {
  KernelGuard guard(Mxfp4KernelChoice::kFma);
  const Layer layer(22, 7.0);
  const Batch b(40, 500);
  const std::vector<float> all = RunMoe(layer, b);
  Batch rev = b;
  for (int64_t n = 0; n < b.N; ++n) {
    const int64_t m = b.N - 1 - n;
    std::copy_n(b.h.begin() + n * kD, kD, rev.h.begin() + m * kD);
    std::copy_n(b.idx.begin() + n * kTopK, kTopK, rev.idx.begin() + m * kTopK);
    std::copy_n(b.gates.begin() + n * kTopK, kTopK, rev.gates.begin() + m * kTopK);
  }
  const std::vector<float> reversed = RunMoe(layer, rev);
  for (int64_t n = 0; n < b.N; ++n) {
    EXPECT_EQ(std::memcmp(reversed.data() + (b.N - 1 - n) * kD, all.data() + n * kD, kD * sizeof(float)), 0)
        << "row " << n;
  }
}

float Swiglu(float g, float u, float limit) {
  g = std::min(g, limit);
  u = std::clamp(u, -limit, limit);
  return g * (1.0f / (1.0f + std::exp(-1.702f * g))) * (u + 1.0f);
}

TEST(ClampedSwigluRow, ClampsGateAboveAndUpBothSides) {
  const float limit = 7.0f;
  // Pairs (gate, up), interleaved as stored.
  const std::vector<std::pair<float, float>> pairs = {
      {10.0f, 0.5f},    // gate clamped to 7
      {7.0f, 0.5f},     // gate at the limit: the same as the row above
      {1.5f, 12.0f},    // up clamped to 7
      {1.5f, 7.0f},     // the same
      {1.5f, -9.0f},    // up clamped to -7
      {1.5f, -7.0f},    // the same
      {-20.0f, 2.0f},   // gate has no lower clamp
      {-7.0f, 2.0f},    // differs from the row above
      {100.0f, 100.0f},  // both clamped
      {7.0f, 7.0f},
      {0.75f, -1.0f},   // up + 1 = 0
      {-0.3f, 0.25f},   // inside
  };
  const int64_t F = static_cast<int64_t>(pairs.size());
  std::vector<float> gu(2 * F), act(F, NAN);
  for (int64_t j = 0; j < F; ++j) {
    gu[2 * j] = pairs[j].first;
    gu[2 * j + 1] = pairs[j].second;
  }
  ClampedSwigluRow(gu.data(), F, limit, act.data());
  for (int64_t j = 0; j < F; ++j) {
    const float want = Swiglu(pairs[j].first, pairs[j].second, limit);
    EXPECT_NEAR(act[j], want, 1e-6f * std::max(1.0f, std::abs(want))) << "pair " << j;
  }
  EXPECT_EQ(act[0], act[1]);
  EXPECT_EQ(act[2], act[3]);
  EXPECT_EQ(act[4], act[5]);
  EXPECT_EQ(act[8], act[9]);
  EXPECT_NE(act[6], act[7]);
  EXPECT_LT(act[6], 0.0f);
  EXPECT_GT(act[6], -1e-12f);  // -20 * sigmoid(-34): tiny
  EXPECT_EQ(act[10], 0.0f);
  // Clamped values in closed form: 7 sigmoid(11.914) (up + 1), up + 1 = 8, -6.
  EXPECT_NEAR(act[9], 7.0f * 8.0f / (1.0f + std::exp(-1.702f * 7.0f)), 1e-5f);
  EXPECT_NEAR(act[5], 1.5f * -6.0f / (1.0f + std::exp(-1.702f * 1.5f)), 1e-6f);
}

// The limit is the argument, not a constant 7.
TEST(ClampedSwigluRow, UsesTheGivenLimit) {
  const float gu[4] = {5.0f, 5.0f, 3.0f, -4.0f};
  float act[2];
  ClampedSwigluRow(gu, 2, 3.0f, act);
  EXPECT_NEAR(act[0], Swiglu(3.0f, 3.0f, 3.0f), 1e-6f);
  EXPECT_NEAR(act[1], Swiglu(3.0f, -3.0f, 3.0f), 1e-6f);
  const float at_limit[4] = {3.0f, 3.0f, 3.0f, -3.0f};
  float act2[2];
  ClampedSwigluRow(at_limit, 2, 3.0f, act2);
  EXPECT_EQ(act[0], act2[0]);
  EXPECT_EQ(act[1], act2[1]);
  // With limit 7 the same inputs are not clamped.
  ClampedSwigluRow(gu, 2, 7.0f, act2);
  EXPECT_NEAR(act2[0], Swiglu(5.0f, 5.0f, 7.0f), 1e-5f);
  EXPECT_GT(act2[0], act[0] + 1.0f);
}

TEST(Mxfp4KernelChoice, ParseAndSet) {
  absl::StatusOr<Mxfp4KernelChoice> fma = ParseMxfp4Kernel("fma");
  ASSERT_TRUE(fma.ok()) << fma.status();
  EXPECT_EQ(*fma, Mxfp4KernelChoice::kFma);
  absl::StatusOr<Mxfp4KernelChoice> dot = ParseMxfp4Kernel("dot");
  ASSERT_TRUE(dot.ok()) << dot.status();
  EXPECT_EQ(*dot, Mxfp4KernelChoice::kDot);
  for (const char* bad : {"xyz", "", "fmadot"}) {
    absl::StatusOr<Mxfp4KernelChoice> k = ParseMxfp4Kernel(bad);
    ASSERT_FALSE(k.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
  }
  EXPECT_EQ(GetMoeMxfp4Kernel(), Mxfp4KernelChoice::kFma);  // the default
  SetMoeMxfp4Kernel(Mxfp4KernelChoice::kDot);
  EXPECT_EQ(GetMoeMxfp4Kernel(), Mxfp4KernelChoice::kDot);
  SetMoeMxfp4Kernel(Mxfp4KernelChoice::kFma);
  EXPECT_EQ(GetMoeMxfp4Kernel(), Mxfp4KernelChoice::kFma);
}

}  // namespace
}  // namespace pdserve
