#include "common/kernels/gemm_dnnl.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "common/kernels/gemv_kmajor.h"

namespace pdserve {
namespace {

// x W^T in double: the reference both GEMMs are held to.
at::Tensor Reference(const at::Tensor& x, const at::Tensor& w) {
  return at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
}

// The largest |error| relative to the size of the output's entries.
double RelError(const at::Tensor& y, const at::Tensor& ref) {
  return (y.to(at::kDouble) - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

// Every test needs the oneDNN path (absent from the GPU image's build).
class GemmDnnlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DnnlGemmBuilt()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev): LinearF32 is at::linear";
  }
};

TEST_F(GemmDnnlTest, MatchesTheReferenceForPrefillShapes) {
  at::manual_seed(3);
  // M past the row kernels' 32 rows, multiples of 8 and not (x padded), and
  // K / N of the 502M model's projections plus odd sizes.
  for (const auto& [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{33, 96, 48}, {37, 768, 200}, {64, 768, 1536},
                                {129, 1536, 768}, {512, 768, 3072}, {41, 100, 7}}) {
    SCOPED_TRACE(::testing::Message() << "M " << M << " K " << K << " N " << N);
    const at::Tensor x = at::randn({M, K});
    const at::Tensor w = at::randn({N, K});
    const at::Tensor y = LinearF32Dnnl(x, w);
    ASSERT_TRUE(y.defined());
    ASSERT_EQ(y.sizes(), (at::IntArrayRef{M, N}));
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_LT(RelError(y, Reference(x, w)), 1e-5);
    // Repeatable: the same shape gives the same bits.
    EXPECT_TRUE(at::equal(LinearF32Dnnl(x, w), y));
  }
}

TEST_F(GemmDnnlTest, ReadsWeightViewsWithARowStride) {
  // The engine's fused products hand out narrowed views (q of qkv, gate of
  // gate|up): rows contiguous, row stride past K.
  at::manual_seed(4);
  const at::Tensor fused = at::randn({200, 300});
  const at::Tensor w = fused.narrow(1, 100, 96);  // [200, 96], stride 300
  const at::Tensor x = at::randn({45, 96}).narrow(0, 5, 40);
  const at::Tensor y = LinearF32Dnnl(x, w);
  ASSERT_TRUE(y.defined());
  EXPECT_LT(RelError(y, Reference(x, w)), 1e-5);
  // W^T row-major with a row stride (W's columns contiguous, as
  // LinearBf16KMajorWidened passes the widened pack) is read in place too.
  const at::Tensor wt = at::randn({96, 256}).narrow(1, 0, 200).t();  // [200, 96], strides {1, 256}
  const at::Tensor yt = LinearF32Dnnl(x, wt);
  ASSERT_TRUE(yt.defined());
  EXPECT_LT(RelError(yt, Reference(x, wt)), 1e-5);
  // A strided x is made contiguous; a W with neither dimension contiguous
  // is not taken (the fallback's job).
  EXPECT_FALSE(LinearF32Dnnl(x, at::randn({200, 192}).slice(1, 0, 192, 2)).defined());
}

// W from its k-major pack, widened and packed in one reorder: the
// reference's values for the whole matrix and for a view of its first rows
// (q within q|kv); a shape whose layout oneDNN does not block that way is
// refused (undefined), not computed wrong.
TEST_F(GemmDnnlTest, ReadsKMajorPacks) {
  at::manual_seed(6);
  const int64_t N = 192, K = 96;
  const at::Tensor w = at::randn({N, K}).to(at::kBFloat16);
  std::vector<uint16_t> pack(KMajorElements(N, K));
  PackBf16KMajor(static_cast<const uint16_t*>(w.data_ptr()), N, K, 0, KMajorGroups(N), pack.data());
  const at::Tensor x = at::randn({40, K});
  int taken = 0;
  for (const int64_t rows : {N, int64_t{128}}) {
    const at::Tensor y = LinearKMajorDnnl(x, pack.data(), rows, K, kKMajorGroup);
    if (!y.defined()) continue;
    ++taken;
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{40, rows}));
    EXPECT_LT(RelError(y, Reference(x, w.narrow(0, 0, rows).to(at::kFloat))), 1e-5) << rows;
  }
  if (taken == 0) GTEST_SKIP() << "oneDNN's weight layout on this CPU is not N-blocks of k-major groups";
  EXPECT_FALSE(LinearKMajorDnnl(x, pack.data(), 100, K, kKMajorGroup).defined());  // not whole blocks
}

TEST_F(GemmDnnlTest, RefusesWhatItDoesNotTake) {
  const at::Tensor x = at::randn({40, 16});
  EXPECT_FALSE(LinearF32Dnnl(x.to(at::kBFloat16), at::randn({8, 16})).defined());
  EXPECT_FALSE(LinearF32Dnnl(x, at::randn({8, 16}).to(at::kBFloat16)).defined());
  EXPECT_FALSE(LinearF32Dnnl(x, at::randn({8, 15})).defined());
  EXPECT_FALSE(LinearF32Dnnl(at::randn({0, 16}), at::randn({8, 16})).defined());
  EXPECT_FALSE(LinearF32Dnnl(at::randn({2, 40, 16}), at::randn({8, 16})).defined());
  // LinearF32 still answers all of them through at::linear.
  EXPECT_EQ(LinearF32(at::randn({0, 16}), at::randn({8, 16})).sizes(), (at::IntArrayRef{0, 8}));
  EXPECT_EQ(LinearF32(at::randn({2, 40, 16}), at::randn({8, 16})).sizes(), (at::IntArrayRef{2, 40, 8}));
}

TEST_F(GemmDnnlTest, AutogradGoesToAtLinear) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({40, 16}).requires_grad_(true);
  const at::Tensor w = at::randn({8, 16}).requires_grad_(true);
  const at::Tensor y = LinearF32(x, w);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(at::allclose(w.grad(), x.sum(0).unsqueeze(0).expand({8, 16})));
}

TEST_F(GemmDnnlTest, LinearF32UsesOneDnnUnlessSwitchedOff) {
  // PDSERVE_F32_GEMM=openblas is the A/B switch; ctest runs without it.
  EXPECT_TRUE(F32GemmUsesDnnl());
  at::manual_seed(6);
  const at::Tensor x = at::randn({48, 64}), w = at::randn({32, 64});
  EXPECT_TRUE(at::equal(LinearF32(x, w), LinearF32Dnnl(x, w)));
}

// bf16 W widened and packed in one reorder: the same bits as the fp32 GEMM
// on W's exact fp32 values (bf16 weights act as their fp32 values).
TEST_F(GemmDnnlTest, Bf16WeightsWidenToTheirFp32Values) {
  at::manual_seed(9);
  const at::Tensor fused = at::randn({200, 300}).to(at::kBFloat16);
  for (const at::Tensor& w : {fused.narrow(1, 0, 300), fused.narrow(1, 100, 96), fused.narrow(0, 0, 50)}) {
    const at::Tensor x = at::randn({41, w.size(1)});
    const at::Tensor y = LinearBf16WidenedDnnl(x, w);
    ASSERT_TRUE(y.defined());
    EXPECT_TRUE(at::equal(y, LinearF32Dnnl(x, w.to(at::kFloat)))) << w.sizes();
  }
  EXPECT_FALSE(LinearBf16WidenedDnnl(at::randn({40, 16}), at::randn({8, 16})).defined());
}

TEST_F(GemmDnnlTest, PackedWeightsAreReadWhileInScope) {
  at::manual_seed(7);
  const at::Tensor x = at::randn({45, 100});
  at::Tensor w = at::randn({200, 100});  // N not a multiple of 64, K not of 16
  const at::Tensor before = Reference(x, w);
  PackedF32Weights packs;
  ASSERT_TRUE(packs.Add(w));
  EXPECT_EQ(packs.count(), 1);
  EXPECT_GE(packs.bytes(), 200 * 100 * 4);
  EXPECT_EQ(packs.bytes(), PackedF32Bytes(200, 100));  // what memory estimates count
  // Change W after packing: in scope the pack (W's old values) is read,
  // out of scope W itself. So the pack is what the GEMM reads.
  w.mul_(-1);
  {
    const ScopedPackedF32 scope(&packs);
    EXPECT_LT(RelError(LinearF32Dnnl(x, w), before), 1e-5);
    // A view with the same address but another shape is not the pack's.
    const at::Tensor half = w.narrow(0, 0, 100);
    EXPECT_LT(RelError(LinearF32Dnnl(x, half), Reference(x, half)), 1e-5);
    {
      const ScopedPackedF32 none(nullptr);  // scopes nest
      EXPECT_LT(RelError(LinearF32Dnnl(x, w), Reference(x, w)), 1e-5);
    }
    EXPECT_LT(RelError(LinearF32(x, w), before), 1e-5);
  }
  EXPECT_LT(RelError(LinearF32Dnnl(x, w), Reference(x, w)), 1e-5);
}

// A bf16 weight's pack holds its widened values: in scope the widening
// GEMM reads it (W changed after packing gives the old values) with the
// same bits as widening per call.
TEST_F(GemmDnnlTest, PackedBf16WeightsAreReadWhileInScope) {
  at::manual_seed(9);
  const at::Tensor x = at::randn({45, 100});
  at::Tensor w = at::randn({200, 100}).to(at::kBFloat16);
  const at::Tensor before = LinearBf16WidenedDnnl(x, w);
  ASSERT_TRUE(before.defined());
  PackedF32Weights packs;
  ASSERT_TRUE(packs.Add(w));
  EXPECT_EQ(packs.bytes(), PackedF32Bytes(200, 100));
  w.mul_(-1);
  {
    const ScopedPackedF32 scope(&packs);
    EXPECT_TRUE(at::equal(LinearBf16WidenedDnnl(x, w), before));
    // An fp32 weight is not served by a bf16 weight's pack.
    const at::Tensor wf = w.to(at::kFloat);
    EXPECT_LT(RelError(LinearF32Dnnl(x, wf), Reference(x, wf)), 1e-5);
  }
  EXPECT_TRUE(at::equal(LinearBf16WidenedDnnl(x, w), LinearF32Dnnl(x, w.to(at::kFloat))));
  EXPECT_FALSE(at::equal(LinearBf16WidenedDnnl(x, w), before));
}

TEST_F(GemmDnnlTest, PacksWeightViewsAndRefusesOthers) {
  at::manual_seed(8);
  const at::Tensor fused = at::randn({128, 300});
  const at::Tensor w = fused.narrow(1, 100, 96);  // row stride 300
  PackedF32Weights packs;
  ASSERT_TRUE(packs.Add(w));
  const at::Tensor x = at::randn({40, 96});
  const at::Tensor want = Reference(x, w);
  fused.zero_();
  const ScopedPackedF32 scope(&packs);
  EXPECT_LT(RelError(LinearF32Dnnl(x, w), want), 1e-5);
  EXPECT_FALSE(packs.Add(at::ones({8, 16}, at::kChar)));
  EXPECT_FALSE(packs.Add(at::randn({16, 8}).t()));
  EXPECT_FALSE(packs.Add(at::randn({0, 16})));
  EXPECT_EQ(packs.count(), 1);
}

}  // namespace
}  // namespace pdserve
