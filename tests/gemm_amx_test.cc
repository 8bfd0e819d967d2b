// The exact AMX prefill GEMM (common/kernels/gemm_amx.h through
// LinearBf16Split, bf16_matmul.h), where the CPU runs it (each test says
// SKIP with the reason where it does not): fp32-GEMM accuracy against a
// double reference on activations and weights spanning 2^+-20 (a bound the
// bf16-output `amx` path fails), agreement with the widened path, row
// tails (M not a multiple of 16 or 32, N a multiple of 16 but not 32),
// rows whose bits do not depend on M or on the thread count or the column
// split, and the widened fallback for shapes the kernel does not take.
#include "common/kernels/gemm_amx.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <tuple>
#include <vector>

#include "common/kernels/bf16_matmul.h"

namespace pdserve {
namespace {

#define SKIP_WITHOUT_AMX()                                                                          \
  if (!AmxSplitAvailable())                                                                         \
  GTEST_SKIP() << "this CPU (or kernel) cannot run the amx ISA (AMX-BF16 + AVX-512BW): the split " \
                  "GEMM cannot run here"

// Restores the thread count a test changed.
struct ThreadsGuard {
  int saved = at::get_num_threads();
  ~ThreadsGuard() { at::set_num_threads(saved); }
};

// Values whose exponents span 2^-20 .. 2^20.
at::Tensor WideRange(int64_t rows, int64_t cols) {
  return at::randn({rows, cols}) * at::pow(2.0, at::randint(-20, 21, {rows, cols}).to(at::kFloat));
}

// max |got - exact| / sum_k |x_k w_k| over outputs: the error an fp32 GEMM
// keeps near K * 2^-24 whatever the cancellation.
double NormalizedError(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble);
  const at::Tensor exact = at::linear(xd, wd);
  const at::Tensor scale = at::linear(xd.abs(), wd.abs());
  return ((got.to(at::kDouble) - exact).abs() / scale.clamp_min(1e-300)).max().item<double>();
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;  // M, N, K

TEST(GemmAmxTest, Fp32AccuracyAgainstADoubleReference) {
  SKIP_WITHOUT_AMX();
  at::manual_seed(1);
  for (auto [M, N, K] : {Shape{33, 96, 64}, Shape{1, 16, 32}, Shape{47, 48, 96}, Shape{200, 768, 1536},
                         Shape{130, 3072, 768}}) {
    const at::Tensor x = WideRange(M, K), w = WideRange(N, K).to(at::kBFloat16);
    const double split = NormalizedError(LinearBf16Split(x, w), x, w);
    const double fp32 = NormalizedError(at::linear(x, w.to(at::kFloat)), x, w);
    const double bf16 = NormalizedError(LinearBf16Amx(x, w), x, w);
    std::printf("M=%ld N=%ld K=%ld normalized max error: split %.3g, fp32 at::linear %.3g, bf16 amx %.3g\n", M, N,
                K, split, fp32, bf16);
    // fp32 level: a few units of 2^-24 per summand at most; the bf16 path's
    // rounded inputs and outputs are ~2^-9.
    constexpr double kBound = 1e-5;
    EXPECT_LT(split, kBound) << M << "x" << N << "x" << K;
    EXPECT_LT(split, 8 * fp32 + 1e-7) << M << "x" << N << "x" << K;
    EXPECT_GT(bf16, kBound) << "the bound does not tell fp32 from bf16 accuracy";
  }
}

TEST(GemmAmxTest, AgreesWithTheWidenedPath) {
  SKIP_WITHOUT_AMX();
  at::manual_seed(2);
  const at::Tensor x = at::randn({512, 768}), w = (at::randn({1536, 768}) / 16).to(at::kBFloat16);
  const at::Tensor split = LinearBf16Split(x, w), widened = LinearBf16Widened(x, w);
  const float scale = at::linear(x.abs(), w.to(at::kFloat).abs()).max().item<float>();
  EXPECT_LT((split - widened).abs().max().item<float>(), 1e-5f * scale);
  EXPECT_FALSE(at::equal(split, LinearBf16Amx(x, w)));
}

// Row tails, and a row's bits are the same whatever M: each output sums the
// same products in the same order.
TEST(GemmAmxTest, RowsDoNotDependOnM) {
  SKIP_WITHOUT_AMX();
  at::manual_seed(3);
  const at::Tensor x = WideRange(100, 128), w = at::randn({80, 128}).to(at::kBFloat16);
  const at::Tensor all = LinearBf16Split(x, w);
  EXPECT_LT(NormalizedError(all, x, w), 1e-5);
  for (int64_t M : {1, 15, 16, 17, 31, 32, 33, 47, 64, 99}) {
    EXPECT_TRUE(at::equal(LinearBf16Split(x.narrow(0, 0, M), w), all.narrow(0, 0, M))) << "M=" << M;
  }
}

TEST(GemmAmxTest, ThreadCountAndColumnSplitChangeNoBits) {
  SKIP_WITHOUT_AMX();
  ThreadsGuard guard;
  at::manual_seed(4);
  const int64_t M = 70, N = 112, K = 96;
  const at::Tensor x = WideRange(M, K), w = at::randn({N, K}).to(at::kBFloat16);
  at::set_num_threads(1);
  const at::Tensor one = LinearBf16Split(x, w);
  at::set_num_threads(2);
  EXPECT_TRUE(at::equal(LinearBf16Split(x, w), one));
  // The raw kernel over column ranges [0, 48) and [48, 112) (a 16-wide tail).
  std::vector<uint32_t> packed(AmxSplitPackedWords(M, K));
  AmxSplitPackX(x.data_ptr<float>(), M, K, 0, AmxSplitRowBlocks(M), packed.data());
  at::Tensor y = at::full({M, N}, -1.0f);
  const auto* wp = static_cast<const uint16_t*>(w.data_ptr());
  AmxSplitGemm(packed.data(), M, K, wp, 48, N, y.data_ptr<float>(), N);
  AmxSplitGemm(packed.data(), M, K, wp, 0, 48, y.data_ptr<float>(), N);
  EXPECT_TRUE(at::equal(y, one));
}

TEST(GemmAmxTest, ShapesTheKernelDoesNotTakeAreWidened) {
  SKIP_WITHOUT_AMX();
  at::manual_seed(5);
  EXPECT_FALSE(AmxSplitSupported(40, 96, 40));
  EXPECT_FALSE(AmxSplitSupported(40, 24, 64));
  for (auto [M, N, K] : {Shape{40, 96, 40}, Shape{40, 24, 64}}) {
    const at::Tensor x = at::randn({M, K}), w = at::randn({N, K}).to(at::kBFloat16);
    EXPECT_TRUE(at::equal(LinearBf16Split(x, w), LinearBf16Widened(x, w))) << M << "x" << N << "x" << K;
  }
}

// The 502M prefill shapes: every run of the split GEMM gives the same bits
// (repeats included), within fp32 accuracy of the widened product and not
// the bf16 AMX product's. Their timing is printed for information only
// (GFLOP/s, 2 M N K per GEMM), never asserted.
TEST(GemmAmxTest, PrefillShapesAreExactAndRepeatable) {
  SKIP_WITHOUT_AMX();
  at::manual_seed(6);
  for (auto [M, N, K] : {Shape{512, 3072, 768}, Shape{512, 768, 1536}, Shape{128, 3072, 768}}) {
    const at::Tensor x = at::randn({M, K}), w = (at::randn({N, K}) / 16).to(at::kBFloat16);
    const at::Tensor split = LinearBf16Split(x, w), widened = LinearBf16Widened(x, w);
    const float scale = at::linear(x.abs(), w.to(at::kFloat).abs()).max().item<float>();
    EXPECT_LT((split - widened).abs().max().item<float>(), 1e-5f * scale) << M << "x" << N << "x" << K;
    EXPECT_FALSE(at::equal(split, LinearBf16Amx(x, w))) << M << "x" << N << "x" << K;
    for (const char* name : {"widen", "split"}) {
      const bool is_split = name[0] == 's';
      const auto t0 = std::chrono::steady_clock::now();
      constexpr int kReps = 5;
      for (int r = 0; r < kReps; ++r) {
        const at::Tensor again = is_split ? LinearBf16Split(x, w) : LinearBf16Widened(x, w);
        ASSERT_TRUE(at::equal(again, is_split ? split : widened)) << name << " " << M << "x" << N << "x" << K
                                                                  << ": repeat " << r << " changed bits";
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kReps;
      std::printf("M=%ld N=%ld K=%ld %s: %.2f ms, %.1f GFLOP/s (%d threads; information, not asserted)\n", M, N, K,
                  name, s * 1e3, 2.0 * M * N * K / s / 1e9, at::get_num_threads());
    }
  }
}

}  // namespace
}  // namespace pdserve
