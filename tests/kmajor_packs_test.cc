// KMajorPacks (common/kernels/kmajor_packs.h): a pack per matrix of a stack,
// found by address only for a matching view (same columns, no more rows),
// holding W's values in the k-major layout; other dtypes are refused; the
// scope is per thread and nests. Take: the pack replaces the matrix, which
// becomes a stand-in (its shape, a new address the packs are found by, no
// readable memory), and those packs cannot be hidden. Q8_0 (int8) stacks
// pack the same way where the CPU has AVX-512 VNNI (the case skips, saying
// so, elsewhere), found only by FindQ8, and refused without VNNI.
#include "common/kernels/kmajor_packs.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_q8_kmajor.h"
#include "common/kernels/linear_int8.h"

namespace pdserve {
namespace {

// Whether the kernel can read one byte at p: write(2) to a pipe fails with
// EFAULT where the page has no access, without a signal.
bool Readable(const void* p) {
  int fds[2];
  if (pipe(fds) != 0) return true;
  const ssize_t n = write(fds[1], p, 1);
  const int err = errno;
  close(fds[0]);
  close(fds[1]);
  return !(n < 0 && err == EFAULT);
}

uint16_t Bits(const at::Tensor& bf16_scalar) {
  const at::BFloat16 v = bf16_scalar.item<at::BFloat16>();
  return v.x;
}

TEST(KMajorPacksTest, EachMatrixOfAStackIsPackedAndFoundByItsAddress) {
  const int64_t E = 3, N = 40, K = 24;
  const at::Tensor w = at::randn({E, N, K}).to(at::kBFloat16);
  KMajorPacks packs;
  ASSERT_TRUE(packs.Add(w, nullptr));
  EXPECT_EQ(packs.count(), E);
  EXPECT_EQ(packs.bytes(), E * 2 * KMajorElements(N, K));
  const auto* base = static_cast<const char*>(w.data_ptr());
  for (int64_t e = 0; e < E; ++e) {
    const void* m = base + e * N * K * 2;
    const uint16_t* p = packs.Find(m, N, K);
    ASSERT_NE(p, nullptr) << e;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) {
        ASSERT_EQ(p[(n / 32) * K * 32 + k * 32 + n % 32], Bits(w[e][n][k])) << e << " " << n << " " << k;
      }
    }
    EXPECT_EQ(packs.Find(m, 8, K), p);             // a view of the first rows
    EXPECT_EQ(packs.Find(m, N + 1, K), nullptr);   // more rows than packed
    EXPECT_EQ(packs.Find(m, N, K + 1), nullptr);   // other columns
  }
  EXPECT_EQ(packs.Find(base + 2, N, K), nullptr);  // not a matrix's start
}

TEST(KMajorPacksTest, TakeReplacesTheMatrixWithAStandIn) {
  const int64_t E = 2, N = 33, K = 16;
  const at::Tensor original = at::randn({E, N, K}).to(at::kBFloat16);
  at::Tensor w = original.clone();
  KMajorPacks packs;
  EXPECT_FALSE(packs.holds_only_copies());
  ASSERT_TRUE(packs.Take(&w, nullptr));
  EXPECT_TRUE(packs.holds_only_copies());
  EXPECT_EQ(w.sizes(), original.sizes());
  EXPECT_EQ(w.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(w.is_contiguous());
  for (int64_t e = 0; e < E; ++e) {
    // Found by the stand-in's address of each matrix (as a view's data_ptr gives it).
    const uint16_t* p = packs.Find(w.select(0, e).data_ptr(), N, K);
    ASSERT_NE(p, nullptr) << e;
    std::vector<float> row(K);
    for (int64_t n : {int64_t{0}, int64_t{31}, int64_t{32}}) {
      WidenKMajorRow(p, K, n, row.data());
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(row[k], original[e][n][k].item<float>()) << e << " " << n << " " << k;
    }
  }
  // The stand-in has no readable memory: a read faults instead of giving
  // zeros (checked through the kernel, which answers EFAULT, so that no
  // process has to die under the sanitizers).
  EXPECT_FALSE(Readable(w.data_ptr()));
  EXPECT_FALSE(Readable(w.select(0, 1).data_ptr()));
  EXPECT_TRUE(Readable(original.data_ptr()));
  // Taken packs stay in use where a benchmark hides the others.
  const ScopedKMajorPacks scope(&packs);
  SetKMajorPacksInUse(false);
  EXPECT_EQ(CurrentKMajorPacks(), &packs);
  SetKMajorPacksInUse(true);
  // Nothing to take: w unchanged.
  at::Tensor f32 = at::randn({32, 16});
  const void* before = f32.data_ptr();
  EXPECT_FALSE(packs.Take(&f32, nullptr));
  EXPECT_EQ(f32.data_ptr(), before);
}

// WidenKMajorT: W^T in fp32 from the pack, padding rows as zeros.
TEST(KMajorPacksTest, WidenedTransposeHoldsTheValues) {
  const int64_t N = 40, K = 24, ldw = KMajorGroups(N) * kKMajorGroup;
  const at::Tensor w = at::randn({N, K}).to(at::kBFloat16);
  KMajorPacks packs;
  ASSERT_TRUE(packs.Add(w, nullptr));
  const uint16_t* p = packs.Find(w.data_ptr(), N, K);
  ASSERT_NE(p, nullptr);
  std::vector<float> wt(K * ldw, -1.0f);
  WidenKMajorT(p, K, 0, KMajorGroups(N), wt.data(), ldw);
  const at::Tensor expected = w.to(at::kFloat).t();
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < ldw; ++n) {
      ASSERT_EQ(wt[k * ldw + n], n < N ? expected[k][n].item<float>() : 0.0f) << k << " " << n;
    }
  }
}

TEST(KMajorPacksTest, Q8StackIsTakenAndFoundOnlyAsQ8) {
  const int64_t E = 2, N = 40, K = 64;
  const at::Tensor values = at::randn({E, N, K});
  at::Tensor w = QuantizeQ8(values);
  const at::Tensor expected = DequantizeQ8(w);
  KMajorPacks packs;
  if (!GemvQ8VnniAvailable()) {
    EXPECT_FALSE(packs.Take(&w, nullptr));  // no kernel reads an int8 pack here
    EXPECT_EQ(packs.count(), 0);
    GTEST_SKIP() << "this CPU lacks AVX-512 F/BW/VL + VNNI: int8 matrices are not packed";
  }
  ASSERT_TRUE(packs.Take(&w, nullptr));
  EXPECT_EQ(w.scalar_type(), at::kChar);
  EXPECT_EQ(packs.bytes(), E * Q8KMajorBytes(N, K));
  std::vector<float> row(K);
  for (int64_t e = 0; e < E; ++e) {
    const void* m = w.select(0, e).data_ptr();
    EXPECT_FALSE(Readable(m));
    EXPECT_EQ(packs.Find(m, N, K), nullptr);  // not a bf16 pack
    const uint8_t* p = packs.FindQ8(m, N, K);
    ASSERT_NE(p, nullptr) << e;
    EXPECT_EQ(packs.FindQ8(m, N, K + 32), nullptr);
    for (int64_t n : {int64_t{0}, int64_t{33}, int64_t{39}}) {
      DequantizeQ8KMajorRow(p, K, n, row.data());
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(row[k], expected[e][n][k].item<float>()) << e << " " << n << " " << k;
    }
  }
}

TEST(KMajorPacksTest, OnlyContiguousBf16OrQ8MatricesArePacked) {
  KMajorPacks packs;
  EXPECT_FALSE(packs.Add(at::randn({32, 16}), nullptr));                              // fp32
  EXPECT_FALSE(packs.Add(at::randn({16, 32}).to(at::kBFloat16).t(), nullptr));        // strided
  EXPECT_FALSE(packs.Add(at::randn({2, 2, 16, 32}).to(at::kBFloat16), nullptr));      // 4-D
  EXPECT_EQ(packs.count(), 0);
  EXPECT_EQ(packs.bytes(), 0);
}

TEST(KMajorPacksTest, ScopeIsPerThreadAndNests) {
  KMajorPacks a, b;
  EXPECT_EQ(CurrentKMajorPacks(), nullptr);
  {
    const ScopedKMajorPacks outer(&a);
    EXPECT_EQ(CurrentKMajorPacks(), &a);
    {
      const ScopedKMajorPacks inner(&b);
      EXPECT_EQ(CurrentKMajorPacks(), &b);
      SetKMajorPacksInUse(false);
      EXPECT_EQ(CurrentKMajorPacks(), nullptr);
      SetKMajorPacksInUse(true);
    }
    EXPECT_EQ(CurrentKMajorPacks(), &a);
    std::thread([] { EXPECT_EQ(CurrentKMajorPacks(), nullptr); }).join();
  }
  EXPECT_EQ(CurrentKMajorPacks(), nullptr);
}

}  // namespace
}  // namespace pdserve
