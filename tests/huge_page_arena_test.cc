// HugePageArena (common/model/huge_page_arena.h): copies keep values, dtype,
// shape and requires_grad; small tensors stay where they are; copies outlive
// the arena; big copies get a mapping of their own; and, where the kernel
// offers transparent huge pages, the copies land on them.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/model/huge_page_arena.h"

namespace pdserve {
namespace {

// The [bracketed] mode of /sys/kernel/mm/transparent_hugepage/enabled, or "".
std::string ThpMode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t a = all.find('['), b = all.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : all.substr(a + 1, b - a - 1);
}

TEST(HugePageArenaTest, CopiesKeepValuesDtypeAndShape) {
  at::manual_seed(1);
  HugePageArena arena;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kChar}) {
    const at::Tensor t = (at::randn({3, 256, 96}) * 50).to(dtype);
    const at::Tensor c = arena.Copy(t);
    EXPECT_NE(c.data_ptr(), t.data_ptr()) << dtype;
    EXPECT_EQ(c.scalar_type(), dtype);
    EXPECT_EQ(c.sizes(), t.sizes());
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data_ptr()) % 64, 0u);
    EXPECT_TRUE(at::equal(c, t)) << dtype;
  }
}

TEST(HugePageArenaTest, StridedInputIsCopiedContiguous) {
  HugePageArena arena;
  const at::Tensor t = at::arange(512 * 256, at::kFloat).reshape({512, 256}).t();
  const at::Tensor c = arena.Copy(t);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(at::equal(c, t));
}

TEST(HugePageArenaTest, SmallTensorsStayWhereTheyAre) {
  HugePageArena arena;
  const at::Tensor t = at::randn({768});  // a norm weight: 3 KiB
  EXPECT_EQ(arena.Copy(t).data_ptr(), t.data_ptr());
  EXPECT_FALSE(arena.Copy(at::Tensor()).defined());  // an unset slot (e.g. a tied head) stays unset
}

TEST(HugePageArenaTest, CopiesOutliveTheArenaAndDoNotOverlap) {
  std::vector<at::Tensor> originals, copies;
  {
    HugePageArena arena(size_t{4} << 20);  // 4 MiB chunks: a 3 MiB tensor gets its own mapping
    for (int i = 0; i < 6; ++i) {
      originals.push_back(at::full({i % 2 == 0 ? int64_t{196608} : int64_t{786432}}, float(i)));  // 0.75, 3 MiB
      copies.push_back(arena.Copy(originals.back()));
    }
  }
  for (size_t i = 0; i < copies.size(); ++i) EXPECT_TRUE(at::equal(copies[i], originals[i])) << i;
  copies[0].fill_(-1.0f);  // writable, and no other copy shares its bytes
  for (size_t i = 1; i < copies.size(); ++i) EXPECT_TRUE(at::equal(copies[i], originals[i])) << i;
}

TEST(HugePageArenaTest, RequiresGradIsKeptAndTrains) {
  HugePageArena arena;
  const at::Tensor t = at::randn({128, 256}).requires_grad_(true);
  at::Tensor c = arena.Copy(t);
  ASSERT_TRUE(c.requires_grad());
  (c * 2).sum().backward();
  ASSERT_TRUE(c.grad().defined());
  EXPECT_TRUE(at::allclose(c.grad(), at::full_like(c, 2.0)));
}

TEST(HugePageArenaTest, CopiesLandOnHugePagesWhereTheKernelOffersThem) {
  const std::string mode = ThpMode();
  if (mode != "always" && mode != "madvise") GTEST_SKIP() << "transparent huge pages are '" << mode << "' here";
  ASSERT_GE(AnonHugePageBytes(), 0) << "/proc/self/smaps_rollup unreadable";
  const int64_t before = AnonHugePageBytes();
  HugePageArena arena;
  const at::Tensor c = arena.Copy(at::ones({int64_t{16} << 20}));  // 64 MiB: its own mapping
  EXPECT_GE(AnonHugePageBytes() - before, int64_t{32} << 20) << "THP mode " << mode;
  EXPECT_EQ(c.sum().item<float>(), float(int64_t{16} << 20));
}

}  // namespace
}  // namespace pdserve
