#include "common/kv/mixed_kv_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/model/cache_layout.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

// The cache's layout of a 2-layer model.
KvLayout Config(int64_t window = 3) {
  ModelConfig c = testing::TinyConfig();
  c.n_layers = 2;  // layer 0 windowed, layer 1 global
  c.n_kv_heads = 1;
  c.n_heads = 1;
  c.head_dim = 2;
  c.rope_identity_pairs_global = 0;
  c.window = window;
  return CacheLayout(c);
}

// Rows whose every element is the token's number: row t holds value t.
at::Tensor Rows(int64_t first, int64_t n) {
  return at::arange(first, first + n, at::kFloat).view({n, 1, 1}).expand({n, 1, 2}).contiguous();
}

std::vector<float> Values(const at::Tensor& k) {
  std::vector<float> out;
  for (int64_t i = 0; i < k.size(0); ++i) out.push_back(k[i][0][0].item<float>());
  return out;
}

TEST(MixedKVCacheTest, RingKeepsTimeOrderAfterRollover) {
  MixedKVCache cache(Config(3));
  for (int64_t t = 1; t <= 7; ++t) ASSERT_TRUE(cache.Append(0, Rows(t, 1), Rows(t, 1)).ok());
  EXPECT_EQ(Values(cache.Get(0).first), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(Values(cache.Get(0).second), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(cache.capacity(0), 3);
}

TEST(MixedKVCacheTest, LongPrefillKeepsTheLastWindowRowsWithHeadZero) {
  MixedKVCache cache(Config(3));
  ASSERT_TRUE(cache.Append(0, Rows(1, 7), Rows(1, 7)).ok());
  EXPECT_EQ(cache.head(0), 0);
  EXPECT_EQ(Values(cache.Get(0).first), (std::vector<float>{5, 6, 7}));
  ASSERT_TRUE(cache.Append(0, Rows(8, 1), Rows(8, 1)).ok());  // decode writes at head
  EXPECT_EQ(cache.head(0), 1);
  EXPECT_EQ(Values(cache.Get(0).first), (std::vector<float>{6, 7, 8}));
}

TEST(MixedKVCacheTest, ShortChunksWrapInPieces) {
  MixedKVCache cache(Config(4));
  ASSERT_TRUE(cache.Append(0, Rows(1, 3), Rows(1, 3)).ok());
  EXPECT_EQ(cache.head(0), 3);
  ASSERT_TRUE(cache.Append(0, Rows(4, 3), Rows(4, 3)).ok());  // wraps: slots 3, 0, 1
  EXPECT_EQ(Values(cache.Get(0).first), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(cache.seq_len(0), 4);
}

TEST(MixedKVCacheTest, SeqLenForBothKindsAndBeforeTheFirstAppend) {
  MixedKVCache cache(Config(3));
  EXPECT_EQ(cache.seq_len(0), 0);
  EXPECT_EQ(cache.seq_len(1), 0);
  EXPECT_EQ(cache.Get(0).first.size(0), 0);
  EXPECT_EQ(cache.Get(1).first.size(0), 0);
  ASSERT_TRUE(cache.Append(0, Rows(0, 2), Rows(0, 2)).ok());
  ASSERT_TRUE(cache.Append(1, Rows(0, 2), Rows(0, 2)).ok());
  EXPECT_EQ(cache.seq_len(0), 2);
  EXPECT_EQ(cache.seq_len(1), 2);
  ASSERT_TRUE(cache.Append(0, Rows(2, 5), Rows(2, 5)).ok());
  ASSERT_TRUE(cache.Append(1, Rows(2, 5), Rows(2, 5)).ok());
  EXPECT_EQ(cache.seq_len(0), 3);  // ring count saturates at the window
  EXPECT_EQ(cache.seq_len(1), 7);
  EXPECT_EQ(Values(cache.Get(1).first), (std::vector<float>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(MixedKVCacheTest, ResetEmptiesEverything) {
  MixedKVCache cache(Config(3));
  ASSERT_TRUE(cache.Append(0, Rows(0, 5), Rows(0, 5)).ok());
  ASSERT_TRUE(cache.Append(1, Rows(0, 5), Rows(0, 5)).ok());
  cache.Reset();
  EXPECT_EQ(cache.seq_len(0), 0);
  EXPECT_EQ(cache.seq_len(1), 0);
  EXPECT_EQ(cache.AllocatedBytes(), 0);
  ASSERT_TRUE(cache.Append(0, Rows(9, 1), Rows(9, 1)).ok());
  EXPECT_EQ(Values(cache.Get(0).first), (std::vector<float>{9}));
}

TEST(MixedKVCacheTest, GlobalGrowsByHalfPlusOne) {
  MixedKVCache cache(Config());
  ASSERT_TRUE(cache.Append(1, Rows(0, 10), Rows(0, 10)).ok());
  EXPECT_EQ(cache.capacity(1), 10);  // max(needed=10, 0*1.5+1)
  ASSERT_TRUE(cache.Append(1, Rows(10, 1), Rows(10, 1)).ok());
  EXPECT_EQ(cache.capacity(1), 16);  // floor(10*1.5)+1
  for (int64_t t = 11; t < 16; ++t) ASSERT_TRUE(cache.Append(1, Rows(t, 1), Rows(t, 1)).ok());
  EXPECT_EQ(cache.capacity(1), 16);
  ASSERT_TRUE(cache.Append(1, Rows(16, 30), Rows(16, 30)).ok());
  EXPECT_EQ(cache.capacity(1), 46);  // needed 46 > floor(16*1.5)+1 = 25
  EXPECT_EQ(Values(cache.Get(1).first).back(), 45);
}

TEST(MixedKVCacheTest, AppendingPastTheCapIsAnErrorAndChangesNothing) {
  KvCacheOptions o;
  o.max_tokens = 10;
  MixedKVCache cache(Config(), o);
  ASSERT_TRUE(cache.Append(1, Rows(0, 8), Rows(0, 8)).ok());
  ASSERT_TRUE(cache.Append(1, Rows(8, 1), Rows(8, 1)).ok());
  EXPECT_LE(cache.capacity(1), 10);  // growth is capped too
  ASSERT_TRUE(cache.Append(1, Rows(9, 1), Rows(9, 1)).ok());
  absl::Status st = cache.Append(1, Rows(10, 1), Rows(10, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(st.message()).find("11 tokens, above the cap of 10"), std::string::npos) << st;
  EXPECT_EQ(cache.seq_len(1), 10);
  // The windowed ring never hits the cap.
  EXPECT_TRUE(cache.Append(0, Rows(0, 50), Rows(0, 50)).ok());
}

TEST(MixedKVCacheTest, BadShapesAndLayersAreInvalidArgument) {
  MixedKVCache cache(Config());
  EXPECT_EQ(cache.Append(5, Rows(0, 1), Rows(0, 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Append(0, at::zeros({1, 2, 2}), at::zeros({1, 2, 2})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Append(0, Rows(0, 2), Rows(0, 1)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MixedKVCacheTest, Bf16StorageHalvesTheBytes) {
  KvCacheOptions o;
  o.dtype = KvDtype::kBF16;
  MixedKVCache bf(Config(), o), f32(Config());
  ASSERT_TRUE(bf.Append(1, Rows(0, 4), Rows(0, 4)).ok());
  ASSERT_TRUE(f32.Append(1, Rows(0, 4), Rows(0, 4)).ok());
  EXPECT_EQ(bf.UsedBytes() * 2, f32.UsedBytes());
  EXPECT_EQ(bf.Get(1).first.scalar_type(), at::kBFloat16);
  EXPECT_EQ(Values(bf.Get(1).first.to(at::kFloat)), (std::vector<float>{0, 1, 2, 3}));
}

// AppendRow (the decode step's raw-pointer append) leaves both layer kinds
// exactly as Append of the same [1, K, d] rows: the same bits in fp32 and
// bf16 (ties, NaN, infinities, subnormals), ring wrap and global growth.
TEST(MixedKVCacheTest, AppendRowEqualsAppendOfOneRow) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    KvCacheOptions o;
    o.dtype = dtype;
    MixedKVCache by_row(Config(3), o), by_tensor(Config(3), o);
    at::manual_seed(9);
    for (int64_t t = 0; t < 30; ++t) {
      at::Tensor k = at::randn({1, 1, 2}) * 1e3, v = at::randn({1, 1, 2});
      if (t == 3) k = at::tensor({1.00390625f, -1.01171875f}).view({1, 1, 2});  // bf16 ties
      if (t == 4) k = at::tensor({NAN, INFINITY}).view({1, 1, 2});
      if (t == 5) v = at::tensor({1e-40f, -1e-42f}).view({1, 1, 2});
      for (int64_t layer : {0, 1}) {
        ASSERT_TRUE(by_tensor.Append(layer, k, v).ok());
        ASSERT_TRUE(by_row.AppendRow(layer, k.data_ptr<float>(), v.data_ptr<float>()).ok());
      }
    }
    for (int64_t layer : {0, 1}) {
      EXPECT_EQ(by_row.seq_len(layer), by_tensor.seq_len(layer));
      EXPECT_EQ(by_row.head(layer), by_tensor.head(layer));
      EXPECT_EQ(by_row.capacity(layer), by_tensor.capacity(layer));
      auto [rk, rv] = by_row.GetUnordered(layer);
      auto [tk, tv] = by_tensor.GetUnordered(layer);
      // Bitwise (NaN == NaN): compare the storage bytes.
      ASSERT_EQ(rk.nbytes(), tk.nbytes());
      EXPECT_EQ(std::memcmp(rk.data_ptr(), tk.data_ptr(), rk.nbytes()), 0) << "layer " << layer;
      EXPECT_EQ(std::memcmp(rv.data_ptr(), tv.data_ptr(), rv.nbytes()), 0) << "layer " << layer;
      const MixedKVCache::RowsView view = by_row.UnorderedRows(layer);
      EXPECT_EQ(view.k, rk.data_ptr());
      EXPECT_EQ(view.v, rv.data_ptr());
      EXPECT_EQ(view.rows, rk.size(0));
    }
  }
}

TEST(MixedKVCacheTest, AppendRowPastTheCapOrLayerIsAnErrorAndChangesNothing) {
  KvCacheOptions o;
  o.max_tokens = 2;
  MixedKVCache cache(Config(), o);
  const float row[2] = {1, 2};
  EXPECT_EQ(cache.UnorderedRows(1).rows, 0);
  EXPECT_EQ(cache.UnorderedRows(1).k, nullptr);
  ASSERT_TRUE(cache.AppendRow(1, row, row).ok());
  ASSERT_TRUE(cache.AppendRow(1, row, row).ok());
  const absl::Status st = cache.AppendRow(1, row, row);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(st.message()).find("3 tokens, above the cap of 2"), std::string::npos) << st;
  EXPECT_EQ(cache.seq_len(1), 2);
  EXPECT_EQ(cache.AppendRow(2, row, row).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.AppendRow(-1, row, row).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MixedKVCacheTest, ExportCarriesGlobalRowsAndTheWindowedTail) {
  MixedKVCache cache(Config(3));
  for (int64_t l = 0; l < 2; ++l) ASSERT_TRUE(cache.Append(l, Rows(0, 7), Rows(0, 7)).ok());
  auto s = cache.Export(7);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->prompt_len, 7);
  EXPECT_EQ(Values(s->k[0]), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(s->k[1].size(0), 7);
  EXPECT_EQ(s->Bytes(), (3 + 7) * 2 * 2 * 4);
  EXPECT_EQ(cache.Export(6).status().code(), absl::StatusCode::kFailedPrecondition);

  auto back = MixedKVCache::Import(Config(3), *s);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->head(0), 0);
  for (int64_t l = 0; l < 2; ++l) {
    EXPECT_TRUE(at::equal(back->Get(l).first, cache.Get(l).first));
    EXPECT_TRUE(at::equal(back->Get(l).second, cache.Get(l).second));
  }
  // Both continue identically.
  ASSERT_TRUE(back->Append(0, Rows(7, 1), Rows(7, 1)).ok());
  ASSERT_TRUE(cache.Append(0, Rows(7, 1), Rows(7, 1)).ok());
  EXPECT_TRUE(at::equal(back->Get(0).first, cache.Get(0).first));
}

TEST(MixedKVCacheTest, ImportOfAShortPromptFillsFromTheStart) {
  MixedKVCache cache(Config(4));
  for (int64_t l = 0; l < 2; ++l) ASSERT_TRUE(cache.Append(l, Rows(0, 2), Rows(0, 2)).ok());
  auto back = MixedKVCache::Import(Config(4), *cache.Export(2));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->head(0), 2);
  EXPECT_EQ(back->seq_len(0), 2);
}

TEST(MixedKVCacheTest, ImportRejectsStatesThatDoNotFit) {
  MixedKVCache cache(Config(3));
  for (int64_t l = 0; l < 2; ++l) ASSERT_TRUE(cache.Append(l, Rows(0, 5), Rows(0, 5)).ok());
  KvHandoffState s = *cache.Export(5);
  KvHandoffState wrong_rows = s;
  wrong_rows.k[0] = Rows(0, 4);
  wrong_rows.v[0] = Rows(0, 4);
  auto r = MixedKVCache::Import(Config(3), wrong_rows);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("layer 0 has 4 rows, expected 3"), std::string::npos) << r.status();
  KvHandoffState wrong_layers = s;
  wrong_layers.k.pop_back();
  EXPECT_EQ(MixedKVCache::Import(Config(3), wrong_layers).status().code(), absl::StatusCode::kInvalidArgument);
  KvCacheOptions small;
  small.max_tokens = 4;
  EXPECT_EQ(MixedKVCache::Import(Config(3), s, small).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace pdserve
