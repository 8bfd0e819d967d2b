// AVX-512F matrix-vector kernels for decode, the wide twin of
// gemv_kernels.cc's AVX2 ones (same arguments, same result bits):
//   GemvF32Avx512, GemvBf16Avx512   y = x W^T for output columns [n0, n1)
// Call only where the CPU has AVX-512F (gemv_kernels.h's GemvIsaAvailable);
// GemvF32/GemvBf16 dispatch here on their own.
//
// Bits: each output sums k in the AVX2 kernel's order (16 lanes, lane j
// taking k = j mod 16 in increasing k, an 8-wide tail into lanes 0-7, the
// same horizontal tree, the scalar tail last), so switching ISA changes no
// token. Speed comes from breaking the FMA latency chain across 4 weight
// rows at once (16 independent chains for 4 rows of x) and reusing each x
// load for the 4 weight rows, and from a software prefetch 4 KiB ahead in
// each row (GemvPrefetchBytes); widening bf16 stays two ops per 16 weights.
// bf16 weights against one row of x go one weight row at a time instead,
// each read whole and in order: DRAM feeds that faster than four rows
// interleaved (docs/benchmarks.md §3).
#pragma once

#include <cstdint>

namespace pdserve {

void GemvF32Avx512(const float* x, int64_t M, int64_t K, const float* W, int64_t n0, int64_t n1, float* y,
                   int64_t ldy);
void GemvBf16Avx512(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
                    int64_t ldy);

}  // namespace pdserve
