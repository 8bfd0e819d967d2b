// RmsNorm (common/model/transformer.h): the one-pass inference path against
// the ATen formula it replaces, row locality (a row's bits do not depend on
// the rows normalized with it), and the autograd path still differentiable.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/model/transformer.h"

namespace pdserve {
namespace {

at::Tensor Formula(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble);
  return xd * at::rsqrt(xd.pow(2).mean(-1, /*keepdim=*/true) + eps) * wd;
}

TEST(RmsNormTest, InferencePathMatchesTheFormula) {
  at::manual_seed(3);
  for (int64_t n : {1, 7, 33, 200}) {
    const at::Tensor x = at::randn({n, 768}) * 3.0, w = at::randn({768});
    const at::Tensor got = RmsNorm(x, w, 1e-5);
    ASSERT_EQ(got.sizes(), x.sizes());
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    // Within a few fp32 ulps of the float64 result.
    EXPECT_LT((got.to(at::kDouble) - Formula(x, w, 1e-5)).abs().max().item<double>(), 1e-5) << n;
  }
}

TEST(RmsNormTest, EpsilonDominatesAZeroRow) {
  const at::Tensor x = at::zeros({2, 16}), w = at::ones({16});
  EXPECT_EQ(RmsNorm(x, w, 1e-5).abs().sum().item<float>(), 0.0f);
  const at::Tensor tiny = at::full({1, 16}, 1e-4f);
  // mean(x^2) = 1e-8 is small against eps = 1e-2: y = x / sqrt(1e-2 + 1e-8).
  EXPECT_NEAR(RmsNorm(tiny, w, 1e-2)[0][0].item<float>(), 1e-3, 1e-6);
}

TEST(RmsNormTest, ARowDoesNotDependOnItsBatch) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({100, 768}), w = at::randn({768});
  const at::Tensor all = RmsNorm(x, w, 1e-5);
  for (int64_t n : {0, 31, 32, 99}) {
    EXPECT_TRUE(at::equal(all[n], RmsNorm(x.narrow(0, n, 1), w, 1e-5)[0])) << n;
  }
  EXPECT_TRUE(at::equal(all.narrow(0, 40, 20), RmsNorm(x.narrow(0, 40, 20), w, 1e-5)));
}

TEST(RmsNormTest, NonContiguousInputIsNormalizedByRow) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({768, 6}).t(), w = at::randn({768});
  EXPECT_TRUE(at::equal(RmsNorm(x, w, 1e-5), RmsNorm(x.contiguous(), w, 1e-5)));
}

TEST(RmsNormTest, GradientsFlowWhenAutogradIsOn) {
  at::manual_seed(6);
  at::Tensor x = at::randn({3, 32}).requires_grad_(true);
  at::Tensor w = at::randn({32}).requires_grad_(true);
  const at::Tensor y = RmsNorm(x, w, 1e-5);
  ASSERT_TRUE(y.requires_grad());  // the ATen path ran
  y.sum().backward();
  ASSERT_TRUE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  EXPECT_GT(w.grad().abs().sum().item<float>(), 0.0f);
  // Forward values agree with the inference path.
  at::NoGradGuard no_grad;
  EXPECT_LT((RmsNorm(x.detach(), w.detach(), 1e-5) - (x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * w))
                .abs()
                .max()
                .item<float>(),
            1e-5);
}

}  // namespace
}  // namespace pdserve
