// The loop that feeds decode-sized matmuls (at most kGemvMaxBatchRows rows
// of x) to the row-group kernels, shared by Linear (fp32/bf16 weights,
// gemv_kernels.h) and LinearQ8 (int8 weights, gemv_q8.h). For ATen
// translation units only: it runs at::parallel_for.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "common/model/gemv_kernels.h"

namespace pdserve {

// Calls kernel(m, rows, t0, t1) for every group of at most kGemvMaxRows
// rows of x starting at row m, and output columns [t0, t1), in parallel
// over the N output columns. Up to kGemvMaxRows rows, a thread streams its
// whole column range once. Past that, a ~64 KiB tile of weight rows
// (`row_bytes` each) goes through every row group while it sits in L2, so
// DRAM sees each weight once per call. Each output is still one kernel row
// with one summation order: tiling changes no bits.
template <typename Kernel>
void ForEachGemvTile(int64_t M, int64_t N, int64_t row_bytes, const Kernel& kernel) {
  const int64_t tile = M <= kGemvMaxRows ? N : std::max<int64_t>(8, (int64_t{64} << 10) / row_bytes);
  at::parallel_for(0, N, /*grain_size=*/128, [&](int64_t n0, int64_t n1) {
    for (int64_t t0 = n0; t0 < n1; t0 += tile) {
      const int64_t t1 = std::min(n1, t0 + tile);
      for (int64_t m = 0; m < M; m += kGemvMaxRows) kernel(m, std::min(kGemvMaxRows, M - m), t0, t1);
    }
  });
}

}  // namespace pdserve
