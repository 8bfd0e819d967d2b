// The quality yardstick: CompareGreedy's cosine and top-1 agreement, and the
// mantissa rounding that gives it a baseline (pdserve-int8-quality
// --dtype f32 --mantissa-bits B, docs/benchmarks.md §7).
#include "common/engine/logits_agreement.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>
#include <gtest/gtest.h>

#include "common/engine/engine.h"
#include "common/model/checkpoint.h"
#include "common/model/weights.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

using testing::FloatBits;
using testing::FloatFromBits;

// Random values over many exponents, plus the exact ties and carries.
at::Tensor Samples() {
  at::Tensor t = at::randn({4096}) * at::exp(at::randn({4096}) * 4);
  const float ties[] = {FloatFromBits(0x3f808000),  // 1 + 2^-8: a tie at 7 bits, even below -> down
                        FloatFromBits(0x3f818000),  // a tie at 7 bits, odd below -> up
                        FloatFromBits(0x3fffffff),  // rounds up into the next exponent
                        -FloatFromBits(0x3f818000), 0.0f, -0.0f, 1e-40f /* subnormal */, 3.0e38f};
  return at::cat({t, at::from_blob(const_cast<float*>(ties), {8}, at::kFloat).clone()});
}

TEST(RoundMantissaTest, SevenBitsIsBf16Rounding) {
  const at::Tensor x = Samples();
  EXPECT_TRUE(at::equal(RoundMantissa(x, 7), x.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_EQ(FloatBits(RoundMantissa(at::full({1}, FloatFromBits(0x3f808000)), 7).item<float>()), 0x3f800000u);
  EXPECT_EQ(FloatBits(RoundMantissa(at::full({1}, FloatFromBits(0x3f818000)), 7).item<float>()), 0x3f820000u);
  EXPECT_EQ(RoundMantissa(at::full({1}, FloatFromBits(0x3fffffff)), 7).item<float>(), 2.0f);
}

TEST(RoundMantissaTest, TwentyThreeBitsChangesNothingAndTheInputIsKept) {
  const at::Tensor x = Samples(), before = x.clone();
  const at::Tensor same = RoundMantissa(x, 23);
  EXPECT_TRUE(at::equal(same, x));
  EXPECT_NE(same.data_ptr(), x.data_ptr());
  RoundMantissa(x, 4);
  EXPECT_TRUE(at::equal(x, before));
}

TEST(RoundMantissaTest, EveryWidthClearsTheLowBitsWithinHalfAStep) {
  const at::Tensor x = Samples().abs().clamp_min(1e-30).clamp_max(1e30);  // normal, positive values
  for (int bits : {1, 5, 10, 12, 16, 20, 22}) {
    const at::Tensor r = RoundMantissa(x, bits);
    const float* px = x.data_ptr<float>();
    const float* pr = r.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_EQ(FloatBits(pr[i]) & ((1u << (23 - bits)) - 1), 0u) << "bits " << bits << " value " << px[i];
      // Half a step of `bits` bits, relative to the value's own binade.
      ASSERT_LE(std::abs(pr[i] - px[i]), std::ldexp(std::abs(px[i]), -bits - 1) * 1.0000001f)
          << "bits " << bits << " value " << px[i];
    }
  }
}

TEST(RoundMatmulWeightsTest, RoundsMatmulWeightsOnlyAndRefusesBadInput) {
  ModelWeights w = RandomWeights(testing::TinyConfig(), 3);
  ModelWeights r = w;
  ASSERT_TRUE(RoundMatmulWeights(&r, 7).ok());
  EXPECT_TRUE(at::equal(r.layers[0].down_proj, w.layers[0].down_proj.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_FALSE(at::equal(r.layers[0].down_proj, w.layers[0].down_proj));
  EXPECT_TRUE(at::equal(r.layers[0].norm1, w.layers[0].norm1));    // not a matmul weight
  EXPECT_TRUE(at::equal(r.layers[0].router, w.layers[0].router));  // the router stays as it is
  EXPECT_EQ(r.layers[0].norm1.data_ptr(), w.layers[0].norm1.data_ptr());

  for (int bad : {0, 24, -3}) {
    ModelWeights c = w;
    const absl::Status s = RoundMatmulWeights(&c, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s;
  }
  ModelWeights b = w;
  ConvertWeights(&b, WeightsDtype::kBF16);
  const absl::Status s = RoundMatmulWeights(&b, 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not fp32"), std::string::npos) << s;
}

TEST(RelativeWeightErrorTest, MeasuresEachConversion) {
  const ModelWeights w = RandomWeights(testing::TinyConfig(), 4);
  EXPECT_EQ(RelativeWeightError(w, w), 0.0);
  ModelWeights r = w, b = w, q = w;
  ASSERT_TRUE(RoundMatmulWeights(&r, 7).ok());
  ConvertWeights(&b, WeightsDtype::kBF16);
  ConvertWeights(&q, WeightsDtype::kInt8);
  const double rounded = RelativeWeightError(w, r), bf16 = RelativeWeightError(w, b);
  EXPECT_EQ(rounded, bf16);  // the same rounding, two ways
  // Round to nearest at 7 bits: a value's error is at most 2^-8 of it, ~2^-10 on average.
  EXPECT_GT(bf16, std::ldexp(1.0, -12));
  EXPECT_LT(bf16, std::ldexp(1.0, -8));
  const double int8 = RelativeWeightError(w, q);
  EXPECT_GT(int8, 0.0);
  EXPECT_LT(int8, 0.02);  // half a step of max|w| / 127 per block
}

// Identical weights agree exactly; rounded ones drift, more with fewer bits.
TEST(CompareGreedyTest, AgreementFallsWithTheMantissa) {
  const ModelWeights w = RandomWeights(testing::TinyConfig(), 5);
  const std::vector<int64_t> prompt = {3, 17, 42, 7, 99, 12, 5, 64};
  auto agreement = [&](int bits) {
    ModelWeights r = w;
    EXPECT_TRUE(RoundMatmulWeights(&r, bits).ok());
    auto ref = Engine::FromWeights(ModelWeights(w)), test = Engine::FromWeights(std::move(r));
    auto a = CompareGreedy(*ref, *test, prompt, 40);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : LogitsAgreement{};
  };
  const LogitsAgreement same = agreement(23), fine = agreement(16), coarse = agreement(3);
  EXPECT_EQ(same.steps, 41);
  EXPECT_EQ(same.top1_agree, 41);
  EXPECT_DOUBLE_EQ(same.min_cosine, 1.0);
  EXPECT_GT(fine.mean_cosine, 0.99999);
  EXPECT_LT(coarse.mean_cosine, fine.mean_cosine);
  EXPECT_LT(coarse.min_cosine, 0.9999);
}

}  // namespace
}  // namespace pdserve
