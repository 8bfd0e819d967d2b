#include "common/kernels/bf16_matmul.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/kernels/gemm_amx.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/kernels/gemv_bf16dot.h"
#include "common/kernels/gemv_kernels.h"
#include "common/model/transformer.h"
#include "common/util/cpu_features.h"
#include "tests/bf16_mode_util.h"

namespace pdserve {
namespace {

TEST(Bf16MatmulTest, ParsesNamesAndRefusesAmxWhereTheCpuHasNone) {
  EXPECT_EQ(ParseBf16Matmul("widen").value(), Bf16Matmul::kWiden);
  EXPECT_EQ(ParseBf16Matmul("fast").status().code(), absl::StatusCode::kInvalidArgument);
  // The default (no flag parsed yet, and "auto") is the exact split GEMM
  // where the CPU runs the amx ISA (unless PDSERVE_ISA forces a narrower
  // one), else the exact k-major packs where the decode kernels run
  // AVX-512, else widen; never the inexact amx or dot.
  const absl::StatusOr<Isa> isa = HostIsa();
  const bool amx_isa = isa.ok() && *isa == Isa::kAmx;
  const Bf16Matmul want = amx_isa                                  ? Bf16Matmul::kAmxSplit
                          : GemvDefaultIsa() == GemvIsa::kAvx512 ? Bf16Matmul::kKMajor
                                                                   : Bf16Matmul::kWiden;
  EXPECT_EQ(DefaultBf16Matmul(), want);
  EXPECT_EQ(GetBf16Matmul(), DefaultBf16Matmul());
  EXPECT_EQ(ParseBf16Matmul("auto").value(), DefaultBf16Matmul());
  if (HostCpuFeatures().amx_bf16) {
    EXPECT_EQ(ParseBf16Matmul("amx").value(), Bf16Matmul::kAmx);
  } else {
    EXPECT_EQ(ParseBf16Matmul("amx").status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(SetBf16Matmul(Bf16Matmul::kAmx).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(GetBf16Matmul(), want);  // unchanged
  }
  if (AmxSplitAvailable()) {
    EXPECT_EQ(ParseBf16Matmul("split").value(), Bf16Matmul::kAmxSplit);
  } else {
    const absl::Status parsed = ParseBf16Matmul("split").status();
    EXPECT_EQ(parsed.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(parsed.message().find("amx_bf16"), std::string::npos) << parsed;
    EXPECT_EQ(SetBf16Matmul(Bf16Matmul::kAmxSplit).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(GetBf16Matmul(), want);
  }
  if (GemvBf16DotAvailable()) {
    EXPECT_EQ(ParseBf16Matmul("dot").value(), Bf16Matmul::kDot);
  } else {
    const absl::Status parsed = ParseBf16Matmul("dot").status();
    EXPECT_EQ(parsed.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(parsed.message().find("avx512_bf16"), std::string::npos) << parsed;
    EXPECT_EQ(SetBf16Matmul(Bf16Matmul::kDot).code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(ParseBf16Matmul("kmajor").value(), Bf16Matmul::kKMajor);  // any CPU: without AVX2 it packs nothing
  for (Bf16Matmul mode :
       {Bf16Matmul::kWiden, Bf16Matmul::kAmxSplit, Bf16Matmul::kAmx, Bf16Matmul::kDot, Bf16Matmul::kKMajor}) {
    const auto parsed = ParseBf16Matmul(Bf16MatmulName(mode));
    if (parsed.ok()) {
      EXPECT_EQ(*parsed, mode) << Bf16MatmulName(mode);
    }
  }
}

// The default path is exact: bf16 weights act as their fp32 values, in the
// fp32 GEMM fp32 weights take (LinearF32).
TEST(Bf16MatmulTest, WidenedPathIsExact) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({70, 64}), w = at::randn({96, 64}).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(LinearBf16Widened(x, w), LinearF32(x, w.to(at::kFloat))));
  EXPECT_TRUE(at::allclose(LinearBf16Widened(x, w), at::linear(x, w.to(at::kFloat)), 1e-5, 1e-5));
}

// AMX parity: bf16 activations and a bf16-rounded output stay within a few
// bf16 ulps of the exact product, at prefill shapes of the 502M model.
TEST(Bf16MatmulAmxTest, PathMatchesTheExactProductWithinBf16Rounding) {
  if (!HostCpuFeatures().amx_bf16) GTEST_SKIP() << "this CPU (or kernel) has no AMX-BF16: the AMX path cannot run here";
  at::manual_seed(4);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{33, 96, 64}, {512, 3072, 768}, {200, 768, 1536}}) {
    const at::Tensor x = at::randn({M, K}), w = (at::randn({N, K}) / 16).to(at::kBFloat16);
    const at::Tensor exact = at::linear(x.to(at::kDouble), w.to(at::kDouble)).to(at::kFloat);
    const at::Tensor got = LinearBf16Amx(x, w);
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    const float scale = exact.abs().max().item<float>();
    const float err = (got - exact).abs().max().item<float>();
    EXPECT_LT(err, 2e-2f * scale) << M << "x" << N << "x" << K << ": max error " << err << " of " << scale;
    // Not the widened product (x is rounded): the AMX path really ran.
    EXPECT_FALSE(at::equal(got, LinearBf16Widened(x, w)));
  }
}

// Linear sends more than 32 rows of a bf16 weight through the chosen path.
TEST(Bf16MatmulAmxTest, LinearFollowsTheChosenPath) {
  if (!HostCpuFeatures().amx_bf16) GTEST_SKIP() << "this CPU (or kernel) has no AMX-BF16: only the widened path exists";
  const testing::RestoreBf16Matmul reset;
  at::manual_seed(6);
  const at::Tensor x = at::randn({40, 64}), w = at::randn({96, 64}).to(at::kBFloat16);
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kAmx).ok());
  EXPECT_TRUE(at::equal(Linear(x, w), LinearBf16Amx(x, w)));
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kWiden).ok());
  EXPECT_TRUE(at::equal(Linear(x, w), LinearBf16Widened(x, w)));
}

// The same for the split path (the amx ISA: AMX-BF16 + AVX-512BW).
TEST(Bf16MatmulSplitTest, LinearFollowsTheChosenPath) {
  if (!AmxSplitAvailable()) GTEST_SKIP() << "this CPU (or kernel) cannot run the amx ISA (AMX-BF16 + AVX-512BW)";
  const testing::RestoreBf16Matmul reset;
  at::manual_seed(6);
  const at::Tensor x = at::randn({40, 64}), w = at::randn({96, 64}).to(at::kBFloat16);
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kAmxSplit).ok());
  const at::Tensor split = Linear(x, w);
  EXPECT_TRUE(at::equal(split, LinearBf16Split(x, w)));
  EXPECT_FALSE(at::equal(split, LinearBf16Amx(x, w)));
}

// dot: every size of x goes through the one kernel, so a row's bits are the
// same in a prefill GEMM, a decode batch or alone; and they are not the
// exact product's (x really is rounded to bf16).
TEST(Bf16MatmulDotTest, GivesARowTheSameBitsInPrefillAndDecode) {
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU (or PDSERVE_ISA) has no AVX512_BF16: dot cannot run here";
  const testing::RestoreBf16Matmul reset;
  at::manual_seed(8);
  const at::Tensor x = at::randn({70, 200}), w = at::randn({96, 200}).to(at::kBFloat16);
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kDot).ok());
  const at::Tensor prefill = Linear(x, w);  // 70 rows: past the decode kernels' 32
  EXPECT_TRUE(at::equal(prefill, LinearBf16Dot(x, w)));
  EXPECT_TRUE(at::equal(Linear(x.narrow(0, 5, 9), w), prefill.narrow(0, 5, 9)));  // a decode batch
  EXPECT_TRUE(at::equal(Linear(x.narrow(0, 69, 1), w), prefill.narrow(0, 69, 1)));  // one sequence
  const at::Tensor exact = LinearBf16Widened(x, w);
  EXPECT_FALSE(at::equal(prefill, exact));
  const at::Tensor rounded = LinearBf16Widened(x.to(at::kBFloat16).to(at::kFloat), w);
  EXPECT_LT((prefill - rounded).abs().max().item<float>(), 1e-4f * rounded.abs().max().item<float>());
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kWiden).ok());
  EXPECT_FALSE(at::equal(Linear(x.narrow(0, 69, 1), w), prefill.narrow(0, 69, 1)));  // widen: exact x
}

}  // namespace
}  // namespace pdserve
