// The fused prefill attention kernel (common/kernels/prefill_attention.h):
// against the full-mask AttendWithSinks, in both ISA builds where the CPU
// has them; a query row's bits do not depend on the rows computed with it;
// rows with no allowed key give zeros.
#include "common/kernels/prefill_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/model/attention.h"

namespace pdserve {
namespace {

struct Shape {
  int64_t H, K, d;
};

struct Case {
  int64_t q_start, T, k_start, S, window;
};

std::string Describe(const Shape& s, const Case& c, DecodeAttnIsa isa) {
  return "H " + std::to_string(s.H) + " K " + std::to_string(s.K) + " d " + std::to_string(s.d) + " q_start " +
         std::to_string(c.q_start) + " T " + std::to_string(c.T) + " k_start " + std::to_string(c.k_start) +
         " S " + std::to_string(c.S) + " window " + std::to_string(c.window) + " " + DecodeAttnIsaName(isa);
}

// The kernel run block by block on one thread with the given ISA, K/V laid
// out by LayOutPrefillKeys (what the threaded path uses).
at::Tensor RunKernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sinks,
                     const Case& c, DecodeAttnIsa isa) {
  const DecodeAttnShape shape{q.size(1), k.size(1), q.size(2), false};
  const PrefillAttnKeyTensors laid = LayOutPrefillKeys(k, v, c.k_start);
  const at::Tensor qc = q.contiguous();
  at::Tensor out = at::full({c.T, shape.n_heads * shape.head_dim}, 7.0f);  // every element must be written
  const PrefillAttnQueries qa{qc.data_ptr<float>(), c.T, c.q_start, c.window};
  std::vector<float> scratch(PrefillAttnScratchFloats(shape));
  for (int64_t b = 0; b < PrefillAttnBlocks(c.T); ++b) {
    for (int64_t g = 0; g < shape.n_kv_heads; ++g) {
      PrefillAttentionBlock(qa, laid.keys, shape, sinks.data_ptr<float>(), b, g, scratch.data(),
                            out.data_ptr<float>(), isa);
    }
  }
  return out;
}

std::vector<DecodeAttnIsa> Isas() {
  std::vector<DecodeAttnIsa> isas = {DecodeAttnIsa::kAvx2};
  if (DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512)) isas.push_back(DecodeAttnIsa::kAvx512);
  return isas;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {0, 300, 0, 300, 128},    // windowed prompt
      {0, 300, 0, 300, 0},      // global prompt
      {0, 37, 0, 37, 8},        // window much smaller than a tile
      {384, 200, 256, 328, 128},  // windowed chunk over a full ring (keys from 256, not tile-aligned past rows)
      {384, 200, 0, 584, 0},    // global chunk over 384 past rows
      {50, 90, 0, 140, 0},      // past rows, T not a multiple of the block
      {7, 33, 0, 40, 16},
      {100, 20, 93, 27, 0},     // keys start inside a tile
      {0, 5, 10, 4, 0},         // no query sees any key: the sink takes all
  };
  return cases;
}

TEST(PrefillAttentionTest, MatchesTheFullMaskFormInEachIsa) {
  if (!PrefillAttnSupported({8, 4, 96, false})) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  if (!DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512)) {
    std::cout << "[ NOTE     ] this CPU has no AVX-512F: only the AVX2 build is checked\n";
  }
  at::manual_seed(11);
  for (const Shape& s : {Shape{8, 4, 96}, Shape{4, 4, 16}, Shape{8, 2, 32}, Shape{3, 1, 48}}) {
    for (const Case& c : Cases()) {
      const at::Tensor q = at::randn({c.T, s.H, s.d}), k = at::randn({c.S, s.K, s.d}), v = at::randn({c.S, s.K, s.d});
      const at::Tensor sinks = at::randn({s.H}) * 3;
      const at::Tensor want =
          AttendWithSinks(q, k, v, sinks, AttentionMask(c.q_start, c.T, c.k_start, c.S, c.window));
      for (DecodeAttnIsa isa : Isas()) {
        const at::Tensor got = RunKernel(q, k, v, sinks, c, isa);
        EXPECT_TRUE(at::allclose(got, want, 2e-5, 2e-5))
            << Describe(s, c, isa) << ": max diff " << (got - want).abs().max().item<float>();
      }
    }
  }
}

// Many small shapes at random offsets (decode-like single rows, rings of a
// window, keys not tile-aligned, dominant sinks) against the full-mask form
// in each ISA; the two ISA builds give the same bits.
TEST(PrefillAttentionTest, MatchesTheFullMaskFormAtRandomOffsets) {
  if (!PrefillAttnSupported({4, 2, 16, false})) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  at::manual_seed(14);
  std::mt19937 rng(14);
  for (int i = 0; i < 300; ++i) {
    const Shape s = i % 2 == 0 ? Shape{4, 2, 16} : Shape{4, 2, 32};
    const int64_t window = std::vector<int64_t>{0, 8, 64, 100}[rng() % 4];
    const int64_t T = 1 + rng() % (i % 3 == 0 ? 3 : 90), q_start = i % 4 == 0 ? 0 : rng() % 200;
    const int64_t k_start = window > 0 ? std::max<int64_t>(0, q_start - window + 1 - int64_t(rng() % 3)) : 0;
    const int64_t S = q_start + T - k_start;
    const Case c{q_start, T, k_start, S, window};
    // Scores from a few units to hundreds; sinks from negligible to dominant.
    const double scale = std::vector<double>{1, 2, 3}[rng() % 3];
    const at::Tensor q = at::randn({T, s.H, s.d}) * scale, k = at::randn({S, s.K, s.d}) * scale;
    const at::Tensor v = at::randn({S, s.K, s.d});
    const at::Tensor sinks = at::randn({s.H}) * 3 + (i % 5 == 0 ? 12.0 : 0.0);
    const at::Tensor want = AttendWithSinks(q, k, v, sinks, AttentionMask(q_start, T, k_start, S, window));
    for (DecodeAttnIsa isa : Isas()) {
      const at::Tensor got = RunKernel(q, k, v, sinks, c, isa);
      ASSERT_TRUE(at::allclose(got, want, 2e-5, 2e-5))
          << Describe(s, c, isa) << ": max diff " << (got - want).abs().max().item<float>();
    }
    if (Isas().size() == 2) {  // the same operations in the same order lane by lane: the same bits
      const at::Tensor a = RunKernel(q, k, v, sinks, c, DecodeAttnIsa::kAvx2);
      const at::Tensor b = RunKernel(q, k, v, sinks, c, DecodeAttnIsa::kAvx512);
      ASSERT_TRUE(at::equal(a, b)) << Describe(s, c, DecodeAttnIsa::kAvx512) << ": differs from avx2 by "
                                   << (a - b).abs().max().item<float>();
    }
  }
}

// Rows [a, T) computed alone (a not a multiple of the block, so every row
// sits in another block with other company) equal the same rows computed
// with all T, bit for bit; through BlockedAttendWithSinks (the threaded
// path) as well.
TEST(PrefillAttentionTest, ARowsBitsDoNotDependOnItsBlock) {
  if (!PrefillAttnSupported({8, 4, 96, false})) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  at::manual_seed(12);
  const Shape s{8, 4, 96};
  for (const Case& c : Cases()) {
    if (c.T < 8) continue;
    const at::Tensor q = at::randn({c.T, s.H, s.d}), k = at::randn({c.S, s.K, s.d}), v = at::randn({c.S, s.K, s.d});
    const at::Tensor sinks = at::randn({s.H});
    for (int64_t a : {int64_t{5}, c.T / 2 + 3}) {
      if (a >= c.T) continue;
      const Case tail{c.q_start + a, c.T - a, c.k_start, c.S, c.window};
      const at::Tensor qt = q.narrow(0, a, c.T - a);
      for (DecodeAttnIsa isa : Isas()) {
        const at::Tensor whole = RunKernel(q, k, v, sinks, c, isa), part = RunKernel(qt, k, v, sinks, tail, isa);
        EXPECT_TRUE(at::equal(part, whole.narrow(0, a, c.T - a))) << Describe(s, c, isa) << " from row " << a;
      }
      const at::Tensor whole = BlockedAttendWithSinks(q, k, v, sinks, c.q_start, c.k_start, c.window);
      const at::Tensor part = BlockedAttendWithSinks(qt, k, v, sinks, tail.q_start, c.k_start, c.window);
      EXPECT_TRUE(at::equal(part, whole.narrow(0, a, c.T - a)))
          << "threaded, q_start " << c.q_start << " from row " << a;
    }
  }
}

// At long lengths (passkey-4l's attention shape: 4 heads, 2 KV heads, d 32)
// the threaded kernel matches the full-mask form on sampled query rows (the
// first, some middle, and the last, deepest ones: those see every key), in
// the default ISA.
TEST(PrefillAttentionTest, MatchesTheFullMaskFormAtLongLengths) {
  if (!PrefillAttnSupported({4, 2, 32, false})) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  at::manual_seed(13);
  for (const int64_t T : {int64_t{8192}, int64_t{32768}}) {
    const at::Tensor q = at::randn({T, 4, 32}), k = at::randn({T, 2, 32}), v = at::randn({T, 2, 32});
    const at::Tensor sinks = at::randn({4});
    const at::Tensor got = BlockedAttendWithSinks(q, k, v, sinks, 0, 0, 0);
    for (const int64_t r0 : {int64_t{0}, T / 2 - 7, T - 48}) {
      const int64_t rows = 48;
      const at::Tensor want = AttendWithSinks(q.narrow(0, r0, rows), k, v, sinks, AttentionMask(r0, rows, 0, T, 0));
      const at::Tensor part = got.narrow(0, r0, rows);
      EXPECT_TRUE(at::allclose(part, want, 2e-5, 2e-5))
          << "T " << T << " rows from " << r0 << ": max diff " << (part - want).abs().max().item<float>();
    }
  }
}

// The fused path's memory is O(T): a 32,768-token global layer (whose T x T
// x H fp32 scores would be 16 GiB) raises this process's peak resident set
// by less than 4x its O(T) tensors (K/V in the kernel's layout, the output:
// 48 MiB) plus 32 MiB.
TEST(PrefillAttentionTest, MemoryStaysLinearInTheLength) {
  if (!PrefillAttnSupported({4, 2, 32, false})) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  const int64_t T = 32768;
  const at::Tensor q = at::randn({T, 4, 32}), k = at::randn({T, 2, 32}), v = at::randn({T, 2, 32});
  const at::Tensor sinks = at::zeros({4});
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const at::Tensor out = BlockedAttendWithSinks(q, k, v, sinks, 0, 0, 0);
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  const int64_t linear = (2 * T * 2 * 32 + T * 4 * 32) * 4;  // bytes
  const int64_t grew = (after.ru_maxrss - before.ru_maxrss) * 1024;
  EXPECT_LT(grew, 4 * linear + (int64_t{32} << 20)) << "peak RSS grew by " << grew << " bytes; O(T) tensors "
                                                     << linear << " bytes";
  EXPECT_EQ(out.size(0), T);
}

// Where the kernel does not take a shape, BlockedAttendWithSinks falls back
// to its ATen form; the fused path gives zeros for rows with no key.
TEST(PrefillAttentionTest, ShapesTheKernelDoesNotTake) {
  EXPECT_FALSE(PrefillAttnSupported({4, 2, 8, false}));     // d not a multiple of 16
  EXPECT_FALSE(PrefillAttnSupported({6, 4, 16, false}));    // H not a multiple of K
  EXPECT_FALSE(PrefillAttnSupported({64, 2, 16, false}));   // 32 query heads per KV head
  const PrefillAttnKeyLayout layout(100, 27);
  EXPECT_EQ(layout.first_pos, 64);
  EXPECT_EQ(layout.offset, 36);
  EXPECT_EQ(layout.slots, 64);  // slots 36..62 hold the keys
  const PrefillAttnKeyLayout across(60, 10);
  EXPECT_EQ(across.first_pos, 0);
  EXPECT_EQ(across.slots, 128);
}

}  // namespace
}  // namespace pdserve
