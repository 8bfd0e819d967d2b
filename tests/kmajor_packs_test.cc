// KMajorPacks (common/model/kmajor_packs.h): a pack per matrix of a stack,
// found by address only for a matching view (same columns, no more rows),
// holding W's values in the k-major layout; other dtypes are refused; the
// scope is per thread and nests.
#include "common/model/kmajor_packs.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "common/model/gemv_kmajor.h"

namespace pdserve {
namespace {

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

TEST(KMajorPacksTest, OnlyContiguousBf16MatricesArePacked) {
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
