// The work split of the decode matmuls (common/kernels/gemv_tiles.h): chunks
// taken from a shared counter cover every output row exactly once, with any
// chunk size and thread count, and inline inside a parallel region.
#include "common/kernels/gemv_tiles.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

namespace pdserve {
namespace {

// How many times body saw each row, for N rows in chunks of `chunk`.
std::vector<int> Coverage(int64_t N, int64_t chunk) {
  auto hits = std::make_unique<std::atomic<int>[]>(N);
  // One thread takes the whole range in one call; more take chunks.
  const int64_t most = at::get_num_threads() > 1 && N > chunk ? chunk : N;
  std::atomic<int> bad_chunks{0};
  ForEachChunk(N, chunk, [&](int64_t n0, int64_t n1) {
    if (n0 >= n1 || n1 - n0 > most) ++bad_chunks;
    for (int64_t n = n0; n < n1; ++n) ++hits[n];
  });
  EXPECT_EQ(bad_chunks.load(), 0) << "N " << N << " chunk " << chunk;
  std::vector<int> out(N);
  for (int64_t n = 0; n < N; ++n) out[n] = hits[n].load();
  return out;
}

TEST(GemvTilesTest, ChunksCoverEveryRowOnce) {
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (int64_t N : {1, 15, 16, 17, 768, 1000}) {
      for (int64_t chunk : {1, 16, 48, 2000}) {
        EXPECT_EQ(Coverage(N, chunk), std::vector<int>(N, 1)) << "threads " << threads << " N " << N;
      }
    }
  }
}

TEST(GemvTilesTest, InsideAParallelRegionRunsInline) {
  at::set_num_threads(2);
  std::atomic<int> calls{0}, whole{0};
  at::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    ForEachChunk(100, 10, [&](int64_t n0, int64_t n1) {
      ++calls;
      if (n0 == 0 && n1 == 100) ++whole;
    });
  });
  EXPECT_EQ(calls.load(), whole.load());
  EXPECT_GE(calls.load(), 1);
}

TEST(GemvTilesTest, TilesPassEveryRowGroupOverEveryColumn) {
  at::set_num_threads(2);
  for (int64_t M : {1, 4, 7, 32}) {
    const int64_t N = 300;
    auto hits = std::make_unique<std::atomic<int>[]>(M * N);
    ForEachGemvTile(M, N, /*row_bytes=*/3072, [&](int64_t m, int64_t rows, int64_t t0, int64_t t1) {
      EXPECT_EQ(m % kGemvMaxRows, 0);
      EXPECT_EQ(rows, std::min(kGemvMaxRows, M - m));
      for (int64_t r = m; r < m + rows; ++r) {
        for (int64_t n = t0; n < t1; ++n) ++hits[r * N + n];
      }
    });
    for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(hits[i].load(), 1) << "M " << M << " at " << i;
  }
}

TEST(GemvTilesTest, ChunkRowsScaleWithThreads) {
  at::set_num_threads(2);
  EXPECT_EQ(GemvChunkRows(768), 48);
  EXPECT_EQ(GemvChunkRows(100), 16);  // at least 16 rows
  EXPECT_EQ(GemvChunkRows(128000), 8000);
  EXPECT_EQ(GemvChunkRows(768, 32), 64);  // whole k-major groups
  EXPECT_EQ(GemvChunkRows(3072, 32), 192);
}

TEST(GemvTilesTest, TilesAreAboutL2SizedInWholeBlocksOfFourRows) {
  EXPECT_EQ(GemvTileRows(1536), 40);  // a bf16 row of 768: 42 rows would fit, 40 are whole blocks
  EXPECT_EQ(GemvTileRows(3072), 20);
  EXPECT_EQ(GemvTileRows(6144), 8);   // 10 rows fit; at least 8
  EXPECT_EQ(GemvTileRows(1 << 20), 8);
}

}  // namespace
}  // namespace pdserve
