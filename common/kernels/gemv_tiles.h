// The loop that feeds decode-sized matmuls (at most kGemvMaxBatchRows rows
// of x) to the row-group kernels, shared by Linear (fp32/bf16 weights,
// gemv_kernels.h) and LinearQ8 (int8 weights, gemv_q8.h). For ATen
// translation units only: it reads at::get_num_threads().
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/kernels/gemv_kernels.h"
#include "common/util/spin_pool.h"

namespace pdserve {

// Calls body(n0, n1) on chunks of `chunk` output rows covering [0, N),
// in parallel: the threads take chunks from a shared counter, so a thread
// that runs slow (its vCPU busy or descheduled for a while, as on a shared
// VM) takes fewer chunks instead of holding up the others at the end of
// the region (llama.cpp's matmuls split work the same way). Which thread
// computes a row changes no bits. The threads are the SpinPool's helpers
// (spin_pool.h: a region costs ~1.5 us there against 5-13 us in OpenMP,
// pdserve-region-bench), or OpenMP's when the pool is busy with another
// thread's region. body must not throw (it may run on a pool thread).
template <typename Body>
void ForEachChunk(int64_t N, int64_t chunk, const Body& body) {
  const int64_t chunks = (N + chunk - 1) / chunk;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), chunks);
  if (threads <= 1 || at::in_parallel_region() || OnSpinPoolThread()) {
    body(int64_t{0}, N);
    return;
  }
  std::atomic<int64_t> next{0};
  const auto take_chunks = [&] {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      body(c * chunk, std::min(N, (c + 1) * chunk));
    }
  };
  if (SpinPool::Get().TryHelp(static_cast<int>(threads - 1), take_chunks)) return;
  at::parallel_for(0, threads, /*grain_size=*/1, [&](int64_t, int64_t) { take_chunks(); });
}

// Output rows per chunk of a decode matmul with N output rows: about 8
// chunks per thread, at least 16 rows, rounded up to a multiple of `align`
// (kKMajorGroup for the k-major kernel, whose passes cover whole groups).
inline int64_t GemvChunkRows(int64_t N, int64_t align = 1) {
  const int64_t rows = std::max<int64_t>(16, (N + 8 * at::get_num_threads() - 1) / (8 * at::get_num_threads()));
  return (rows + align - 1) / align * align;
}

// Calls kernel(m, rows, t0, t1) for every group of at most `group_rows`
// rows of x starting at row m, and output columns [t0, t1), in parallel
// over the N output columns (ForEachChunk). Up to `group_rows` rows, a
// chunk streams its column range once. Past that, a chunk is a tile of
// GemvTileRows(row_bytes) weight rows that goes through every row group
// while it sits in L2, so DRAM sees each weight once per call. Each output
// is still one kernel row with one summation order: tiling changes no bits.
// A kernel that blocks any number of rows itself (the k-major one) takes
// group_rows = M, and `align` = its output group, so chunks hold whole groups.
template <typename Kernel>
void ForEachGemvTile(int64_t M, int64_t N, int64_t row_bytes, const Kernel& kernel,
                     int64_t group_rows = kGemvMaxRows, int64_t align = 1) {
  const int64_t chunk = M <= group_rows ? GemvChunkRows(N, align) : GemvTileRows(row_bytes);
  ForEachChunk(N, chunk, [&](int64_t t0, int64_t t1) {
    for (int64_t m = 0; m < M; m += group_rows) kernel(m, std::min(group_rows, M - m), t0, t1);
  });
}

}  // namespace pdserve
