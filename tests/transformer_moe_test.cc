// Transformer::MoeRows (decode-sized batches: every expert of a layer in
// two parallel regions) against Moe's general path (ATen ops per expert),
// bit for bit, through whole forwards: with grad mode on, Moe takes the
// general path; under NoGradGuard, MoeRows. Nothing else in a no-cache
// forward depends on grad mode when no weight requires grad.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "common/kernels/bf16_matmul.h"
#include "common/model/checkpoint.h"
#include "common/kernels/gemv_bf16dot.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/linear_int8.h"
#include "common/model/transformer.h"
#include "tests/bf16_mode_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

at::Tensor Logits(const Transformer& model, int64_t T, bool grad_mode) {
  at::AutoGradMode mode(grad_mode);
  at::Tensor ids = at::arange(T, at::kLong).mul_(37).add_(11).remainder_(model.config().vocab_size);
  ForwardOptions fo;
  fo.all_logits = true;
  absl::StatusOr<at::Tensor> logits = model.Forward(ids, {Segment{nullptr, 0, T}}, fo);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? logits->detach() : at::Tensor();
}

// Every row count MoeRows takes (1 to 32: experts with 0, a few, and more
// than 4 rows, the kernels' row group), against the general path.
void ExpectMoeRowsEqualsGeneralPath(const ModelConfig& c, WeightsDtype dtype) {
  ModelWeights w = RandomWeights(c, 7);
  ConvertWeights(&w, dtype);
  const Transformer model(std::move(w));
  for (int64_t T : {1, 2, 5, 17, 32}) {
    const at::Tensor rows = Logits(model, T, /*grad_mode=*/false);
    const at::Tensor general = Logits(model, T, /*grad_mode=*/true);
    ASSERT_TRUE(rows.defined() && general.defined());
    EXPECT_TRUE(at::equal(rows, general)) << T << " tokens: max |diff| "
                                          << (rows - general).abs().max().item<double>();
  }
}

class MoeRowsTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (!GemvAvailable()) GTEST_SKIP() << "no AVX2+FMA: the decode kernels (and MoeRows) do not run here";
  }
  ModelConfig Config() const {
    ModelConfig c = testing::TinyConfig();
    c.n_shared_experts = GetParam();
    return c;
  }
};

TEST_P(MoeRowsTest, F32EqualsTheGeneralPath) { ExpectMoeRowsEqualsGeneralPath(Config(), WeightsDtype::kF32); }

TEST_P(MoeRowsTest, Bf16EqualsTheGeneralPath) { ExpectMoeRowsEqualsGeneralPath(Config(), WeightsDtype::kBF16); }

TEST_P(MoeRowsTest, Bf16DotEqualsTheGeneralPath) {
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU (or PDSERVE_ISA) has no AVX512_BF16: dot cannot run here";
  const testing::RestoreBf16Matmul restore;
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kDot).ok());
  ExpectMoeRowsEqualsGeneralPath(Config(), WeightsDtype::kBF16);
}

// 0, 1 and 2 shared experts: the weighted sum starts from 0, one shared
// output, or a sum of them.
INSTANTIATE_TEST_SUITE_P(SharedExperts, MoeRowsTest, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int64_t>& p) { return "shared" + std::to_string(p.param); });

// Q8_0 experts through the kernel PDSERVE_Q8_KERNEL picks (read once per
// process: ctest runs this case again as transformer_moe_q8dot_test with
// PDSERVE_Q8_KERNEL=dot).
TEST_P(MoeRowsTest, Int8EqualsTheGeneralPath) {
  if (!GemvQ8Available()) GTEST_SKIP() << "no AVX2+FMA+F16C: the int8 decode kernels do not run here";
  SCOPED_TRACE(Q8KernelIsDot() ? "int8 dot kernel" : "int8 fma kernel");
  ExpectMoeRowsEqualsGeneralPath(Config(), WeightsDtype::kInt8);
}

}  // namespace
}  // namespace pdserve
