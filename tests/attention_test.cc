#include "common/model/attention.h"
#include "common/kernels/decode_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace pdserve {
namespace {

TEST(AttentionMaskTest, SlidingWindowBlocksKeysOlderThanW) {
  // Prefill of 6 tokens at positions 0..5 with window 3.
  at::Tensor m = AttentionMask(0, 6, 0, 6, 3);
  ASSERT_TRUE(m.defined());
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      EXPECT_EQ(m[i][j].item<bool>(), j <= i && i - j < 3) << i << "," << j;
    }
  }
}

TEST(AttentionMaskTest, AlignsToAbsolutePositions) {
  // A chunk at positions 10..12 over keys at 8..12, window 3.
  at::Tensor m = AttentionMask(10, 3, 8, 5, 3);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t s = 0; s < 5; ++s) {
      const int64_t i = 10 + t, j = 8 + s;
      EXPECT_EQ(m[t][s].item<bool>(), j <= i && i - j < 3);
    }
  }
  // A single query over keys all in range needs no mask.
  EXPECT_FALSE(AttentionMask(12, 1, 10, 3, 3).defined());
  EXPECT_FALSE(AttentionMask(12, 1, 0, 13, 0).defined());
}

TEST(AttentionTest, SlidingWindowIgnoresOldKeysAtPrefill) {
  at::manual_seed(0);
  const int64_t T = 10, W = 4;
  at::Tensor q = at::randn({T, 2, 8}), k = at::randn({T, 1, 8}), v = at::randn({T, 1, 8});
  at::Tensor sinks = at::zeros({2});
  at::Tensor out = AttendWithSinks(q, k, v, sinks, AttentionMask(0, T, 0, T, W));
  // Changing keys/values older than the window of the last query changes nothing for it.
  at::Tensor k2 = k.clone(), v2 = v.clone();
  k2.narrow(0, 0, T - W).normal_();
  v2.narrow(0, 0, T - W).normal_();
  at::Tensor out2 = AttendWithSinks(q, k2, v2, sinks, AttentionMask(0, T, 0, T, W));
  EXPECT_TRUE(at::equal(out[T - 1], out2[T - 1]));
  // ...but changing the oldest key inside the window does.
  k2.narrow(0, T - W, 1).normal_();
  at::Tensor out3 = AttendWithSinks(q, k2, v2, sinks, AttentionMask(0, T, 0, T, W));
  EXPECT_FALSE(at::allclose(out[T - 1], out3[T - 1]));
}

TEST(AttentionTest, SinkEqualsAHandWrittenSoftmaxWithTheExtraColumn) {
  at::manual_seed(1);
  const int64_t T = 3, S = 5, H = 4, K = 2, d = 8;
  at::Tensor q = at::randn({T, H, d}), k = at::randn({S, K, d}), v = at::randn({S, K, d});
  at::Tensor sinks = at::tensor({-10.0f, 0.5f, 3.0f, 15.0f});
  at::Tensor mask = AttentionMask(S - T, T, 0, S, 0);
  at::Tensor out = AttendWithSinks(q, k, v, sinks, mask);
  auto qa = q.accessor<float, 3>(), ka = k.accessor<float, 3>(), va = v.accessor<float, 3>();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t i = S - T + t;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / K);
      const double z = sinks[h].item<float>();
      std::vector<double> s(i + 1);
      double m = z;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += qa[t][h][e] * ka[j][g][e];
        s[j] = dot / std::sqrt(static_cast<double>(d));
        m = std::max(m, s[j]);
      }
      double denom = std::exp(z - m);
      for (double x : s) denom += std::exp(x - m);
      for (int64_t e = 0; e < d; ++e) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) o += std::exp(s[j] - m) / denom * va[j][g][e];
        EXPECT_NEAR(out[t][h * d + e].item<float>(), o, 1e-5) << "t=" << t << " h=" << h;
      }
    }
  }
}

TEST(AttentionTest, GqaMatchesRepeatedKv) {
  at::manual_seed(2);
  const int64_t T = 4, H = 6, K = 2, d = 4;
  at::Tensor q = at::randn({T, H, d}), k = at::randn({T, K, d}), v = at::randn({T, K, d});
  at::Tensor sinks = at::randn({H});
  at::Tensor mask = AttentionMask(0, T, 0, T, 0);
  at::Tensor grouped = AttendWithSinks(q, k, v, sinks, mask);
  at::Tensor full = AttendWithSinks(q, k.repeat_interleave(H / K, 1), v.repeat_interleave(H / K, 1), sinks, mask);
  EXPECT_TRUE(at::allclose(grouped, full, 1e-6, 1e-6));
}

TEST(AttentionTest, Bf16KeysAreComputedInF32) {
  at::manual_seed(3);
  at::Tensor q = at::randn({1, 2, 4}), k = at::randn({3, 1, 4}), v = at::randn({3, 1, 4});
  at::Tensor a = AttendWithSinks(q, k.to(at::kBFloat16), v.to(at::kBFloat16), at::zeros({2}), at::Tensor());
  at::Tensor b = AttendWithSinks(q, k.to(at::kBFloat16).to(at::kFloat), v.to(at::kBFloat16).to(at::kFloat),
                                 at::zeros({2}), at::Tensor());
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(a, b));
}


// The fused decode kernel gives AttendWithSinks' numbers for one query:
// GQA (2 query heads per KV head), fp32 and bf16 K/V, head dims with and
// without a tail past the 8-wide vectors, 1 to 130 rows.
// The blocked form equals the full-mask form on random inputs: windowed and
// global, a whole prompt (keys = queries) and chunks over past cache rows
// (k_start < q_start), block sizes that do and do not divide T, bf16 keys.
TEST(BlockedAttentionTest, MatchesFullMaskAttendWithSinks) {
  at::manual_seed(7);
  const int64_t H = 4, K = 2, d = 16;
  struct Case {
    int64_t q_start, T, past, window, block;
  };
  const std::vector<Case> cases = {
      {0, 300, 0, 128, 64},    // windowed prompt
      {0, 300, 0, 0, 128},     // global prompt
      {0, 257, 0, 32, 100},    // block not dividing T, window < block
      {384, 200, 128, 128, 64},  // windowed chunk over a full ring (past = window)
      {384, 200, 384, 0, 64},  // global chunk over 384 past rows
      {50, 90, 50, 0, 128},    // one block, past rows
      {7, 33, 7, 16, 8},
  };
  for (const Case& c : cases) {
    const int64_t S = c.past + c.T, k_start = c.q_start - c.past;
    at::Tensor q = at::randn({c.T, H, d}), k = at::randn({S, K, d}), v = at::randn({S, K, d});
    at::Tensor sinks = at::randn({H});
    const at::Tensor want = AttendWithSinks(q, k, v, sinks, AttentionMask(c.q_start, c.T, k_start, S, c.window));
    const at::Tensor got = BlockedAttendWithSinks(q, k, v, sinks, c.q_start, k_start, c.window, c.block);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5))
        << "q_start " << c.q_start << " T " << c.T << " past " << c.past << " window " << c.window
        << ": max diff " << (got - want).abs().max().item<float>();
    const at::Tensor kb = k.to(at::kBFloat16), vb = v.to(at::kBFloat16);
    const at::Tensor want_bf = AttendWithSinks(q, kb, vb, sinks, AttentionMask(c.q_start, c.T, k_start, S, c.window));
    EXPECT_TRUE(at::allclose(BlockedAttendWithSinks(q, kb, vb, sinks, c.q_start, k_start, c.window, c.block),
                             want_bf, 1e-5, 1e-5));
  }
}

// Keys that no query may see (all later than the queries) leave only the
// sink: both forms give zeros.
TEST(BlockedAttentionTest, NoAllowedKeyGivesZeros) {
  at::manual_seed(8);
  at::Tensor q = at::randn({5, 2, 8}), k = at::randn({4, 1, 8}), v = at::randn({4, 1, 8});
  at::Tensor sinks = at::zeros({2});
  const at::Tensor got = BlockedAttendWithSinks(q, k, v, sinks, 0, 10, 0, 2);
  EXPECT_TRUE(at::equal(got, at::zeros({5, 16})));
  EXPECT_TRUE(at::allclose(AttendWithSinks(q, k, v, sinks, AttentionMask(0, 5, 10, 4, 0)), got));
}

TEST(DecodeAttentionTest, MatchesAttendWithSinksForOneQuery) {
  at::manual_seed(3);
  for (int64_t d : {16, 20, 96}) {
    for (int64_t S : {1, 7, 130}) {
      for (bool bf16 : {false, true}) {
        const int64_t H = 4, K = 2;
        at::Tensor q = at::randn({1, H, d});
        at::Tensor k = at::randn({S, K, d}).to(bf16 ? at::kBFloat16 : at::kFloat);
        at::Tensor v = at::randn({S, K, d}).to(bf16 ? at::kBFloat16 : at::kFloat);
        at::Tensor sinks = at::randn({H}) * 3;
        at::Tensor want = AttendWithSinks(q, k, v, sinks, at::Tensor());
        const DecodeAttnRows rows{k.data_ptr(), v.data_ptr(), S};
        const DecodeAttnShape shape{H, K, d, bf16};
        std::vector<float> out(H * d);
        std::vector<float> scratch(DecodeAttnScratchFloats(shape) + DecodeAttnSplits(S) * DecodeAttnPartialFloats(shape));
        DecodeAttention(q.data_ptr<float>(), rows, shape, sinks.data_ptr<float>(), scratch.data(), out.data());
        at::Tensor got = at::from_blob(out.data(), {1, H * d}, at::kFloat);
        EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5))
            << "d " << d << " S " << S << " bf16 " << bf16 << " max diff "
            << (got - want).abs().max().item<float>();
      }
    }
  }
}

}  // namespace
}  // namespace pdserve
