#include "common/model/rope.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/test_util.h"

namespace pdserve {
namespace {

TEST(RopeTest, MscaleMatchesTheSpec) {
  Rope rope{ModelConfig{}};
  EXPECT_NEAR(rope.mscale(), 0.1 * std::log(32.0) + 1.0, 1e-12);
  EXPECT_NEAR(rope.mscale(), 1.3466, 1e-4);
}

TEST(RopeTest, YarnRampInterpolatesOnlyLowFrequencies) {
  ModelConfig c;  // d = 96, theta 1e5, factor 32, L0 4096, beta 32/1
  Rope rope(c);
  const double d = 96;
  auto corr = [&](double r) { return d * std::log(4096.0 / (r * 2 * M_PI)) / (2 * std::log(1e5)); };
  const double low = std::max(std::floor(corr(32)), 0.0), high = std::min(std::ceil(corr(1)), d - 1);
  for (int64_t i = 0; i < 48; ++i) {
    const double base = std::pow(1e5, -2.0 * i / d);
    if (i <= low) {
      EXPECT_DOUBLE_EQ(rope.inv_freq(i), base) << i;
    } else if (i >= high) {
      EXPECT_DOUBLE_EQ(rope.inv_freq(i), base / 32) << i;
    } else {
      EXPECT_LT(rope.inv_freq(i), base) << i;
      EXPECT_GT(rope.inv_freq(i), base / 32) << i;
    }
  }
}

// gpt-oss (truncate: false): the correction range stays fractional. At
// gpt-oss-20b's values (d 64, theta 150000, L0 4096, beta 32/1) it is
// [8.0928, 17.3980], so pair 8 is already ramped and pair 17 not yet fully.
TEST(RopeTest, UntruncatedYarnKeepsTheFractionalRange) {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 150000;
  c.yarn.truncate = false;
  Rope rope(c);
  const double low = 8.0928, high = 17.3980;  // to 4 decimals
  for (int64_t i : {0, 8, 9, 17, 18, 31}) {
    const double base = std::pow(150000.0, -2.0 * i / 64);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    EXPECT_NEAR(rope.inv_freq(i), base / 32 * ramp + base * (1 - ramp), 1e-4 * base) << i;
  }
  // Rounded out to [8, 18], the ramp differs on the pairs in between only.
  c.yarn.truncate = true;
  const Rope truncated(c);
  for (int64_t i = 0; i < 32; ++i) {
    if (i <= 8 || i >= 18) {
      EXPECT_DOUBLE_EQ(truncated.inv_freq(i), rope.inv_freq(i)) << i;
    } else {
      EXPECT_NE(truncated.inv_freq(i), rope.inv_freq(i)) << i;
    }
  }
}

TEST(RopeTest, ScalarFastPathEqualsTheTableBitForBit) {
  ModelConfig c;
  Rope rope(c);
  for (bool global : {false, true}) {
    at::Tensor tc, ts;
    rope.Table(0, 5000, global, &tc, &ts);
    std::vector<float> sc(48), ss(48);
    for (int64_t p : {0, 1, 127, 128, 4095, 4096, 4999}) {
      rope.Angles(p, global, sc.data(), ss.data());
      for (int64_t i = 0; i < 48; ++i) {
        ASSERT_EQ(sc[i], tc[p][i].item<float>()) << "p=" << p << " i=" << i;
        ASSERT_EQ(ss[i], ts[p][i].item<float>()) << "p=" << p << " i=" << i;
      }
    }
    // Far positions grow the table; still equal.
    at::Tensor fc, fs;
    rope.Table(131000, 72, global, &fc, &fs);
    rope.Angles(131071, global, sc.data(), ss.data());
    for (int64_t i = 0; i < 48; ++i) ASSERT_EQ(sc[i], fc[71][i].item<float>());
  }
}

TEST(RopeTest, GlobalLayersLeaveIdentityPairsUnrotated) {
  ModelConfig c;
  Rope rope(c);
  std::vector<float> gc(48), gs(48), wc(48), ws(48);
  rope.Angles(1000, /*global=*/true, gc.data(), gs.data());
  rope.Angles(1000, /*global=*/false, wc.data(), ws.data());
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(gc[i], 1.0f);
    EXPECT_EQ(gs[i], 0.0f);
    EXPECT_NE(wc[i], 1.0f);
  }
  for (int64_t i = 12; i < 48; ++i) {
    EXPECT_EQ(gc[i], wc[i]);
    EXPECT_EQ(gs[i], ws[i]);
  }
  const double a = 1000 * rope.inv_freq(20);
  EXPECT_FLOAT_EQ(wc[20], static_cast<float>(std::cos(a) * rope.mscale()));
}

TEST(RopeTest, ApplyRotatesHalfSplitPairs) {
  // One head, d = 4: pairs (0, 2) and (1, 3).
  at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 4});
  at::Tensor cos = at::tensor({0.5f, 2.0f}).view({1, 2}), sin = at::tensor({0.25f, -1.0f}).view({1, 2});
  at::Tensor y = Rope::Apply(x, cos, sin).view({4});
  EXPECT_FLOAT_EQ(y[0].item<float>(), 1 * 0.5f - 3 * 0.25f);
  EXPECT_FLOAT_EQ(y[1].item<float>(), 2 * 2.0f - 4 * -1.0f);
  EXPECT_FLOAT_EQ(y[2].item<float>(), 3 * 0.5f + 1 * 0.25f);
  EXPECT_FLOAT_EQ(y[3].item<float>(), 4 * 2.0f + 2 * -1.0f);
}

// The inference path (one pass, no autograd) gives the differentiable ATen
// path's bits: the same products and sums, on strided views of q|kv too.
TEST(RopeTest, InferencePathEqualsTheAutogradPathBitForBit) {
  at::manual_seed(7);
  const int64_t N = 37, H = 8, d = 96;
  const at::Tensor qkv = at::randn({N, 3 * H * d}) * 40;
  const at::Tensor x = qkv.narrow(1, H * d, H * d).view({N, H, d});  // strided rows
  const at::Tensor cos = at::randn({N, d / 2}), sin = at::randn({N, d / 2});
  const at::Tensor fast = Rope::Apply(x, cos, sin);
  const at::Tensor leaf = x.detach().clone().requires_grad_(true);
  const at::Tensor slow = Rope::Apply(leaf, cos, sin);
  ASSERT_TRUE(slow.requires_grad());  // the ATen path ran
  EXPECT_FALSE(fast.requires_grad());
  EXPECT_TRUE(at::equal(fast, slow.detach())) << (fast - slow.detach()).abs().max().item<float>();
}

}  // namespace
}  // namespace pdserve
