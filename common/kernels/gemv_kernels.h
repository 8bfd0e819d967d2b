// Matrix-vector kernels for decode: y = x W^T for a few rows of x, reading
// each weight row once. Decode is bound by weight bandwidth, and LibTorch's
// small-M matmul reaches only a fraction of it (docs/benchmarks.md).
//
// Two builds of the kernels: AVX2+FMA (the baseline, gemv_kernels.cc) and
// AVX-512F (gemv_avx512.cc), with the same result bits; GemvF32/GemvBf16
// take the widest the CPU has unless PDSERVE_ISA=avx2 forces the baseline.
//
// No ATen here: the file is compiled for AVX2+FMA, and must not define
// inline ATen code that other files would then share.
#pragma once

#include <cstdint>

namespace pdserve {

// Rows of x processed per pass; callers loop for more.
inline constexpr int64_t kGemvMaxRows = 4;
// Linear uses these kernels up to this many rows (a decode batch), and
// OpenBLAS past it (prefill), whose summation order differs.
inline constexpr int64_t kGemvMaxBatchRows = 32;

// True when the CPU has AVX2 and FMA (checked once at run time).
bool GemvAvailable();

enum class GemvIsa { kAvx2 = 0, kAvx512 = 1 };
// Whether this CPU can run the kernels built for `isa`.
bool GemvIsaAvailable(GemvIsa isa);
// The widest available, or kAvx2 when PDSERVE_ISA names avx2 (cpu_features.h's
// HostIsa); computed once.
GemvIsa GemvDefaultIsa();
const char* GemvIsaName(GemvIsa isa);  // "avx2", "avx512"

// How far ahead (bytes) every decode kernel (these and gemv_q8.h's)
// software-prefetches its weight rows: 4096, or PDSERVE_GEMV_PREFETCH (0 turns
// it off, for A/B runs); read once. On the Sapphire Rapids VM the hardware
// prefetchers alone left bf16 and int8 rows at ~60% of the bytes/s of fp32
// ones (docs/benchmarks.md §3).
int64_t GemvPrefetchBytes();

// Weight rows per tile of a matmul with more than kGemvMaxRows rows of x
// (gemv_tiles.h, gemv_matrix.h): about 64 KiB of rows of `row_bytes` (they
// stay in L2 while every row group passes), a multiple of 4 (the kernels
// take weight rows 4 at a time for 2-4 rows of x; a leftover row runs
// alone, at a fraction of the speed), at least 8.
int64_t GemvTileRows(int64_t row_bytes);

// For output columns n in [n0, n1): y[m * ldy + n] = sum_k x[m * K + k] * W[n * K + k],
// m < M <= kGemvMaxRows.
// Summation order, the same in both builds and for every M (so a row's bits
// depend neither on the ISA nor on its decode batch): the K / 16 whole
// 16-wide blocks of k go to two chains of 16 fp32 lanes, even-numbered
// blocks to chain 0 and odd ones to chain 1, each chain in order of k (two
// chains: one is bound by the FMA latency); an 8-wide block after them goes
// into chain 1's lanes 0-7. Then chain 0 + chain 1 lane by lane, lanes i +
// i + 8, the tree of avx2::HorizontalSum, and the last K mod 8 products one
// by one. W is fp32, or bf16 as raw uint16 (upper half of an fp32).
// Without `isa`: GemvDefaultIsa().
void GemvF32(const float* x, int64_t M, int64_t K, const float* W, int64_t n0, int64_t n1, float* y,
             int64_t ldy, GemvIsa isa);
void GemvBf16(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
              int64_t ldy, GemvIsa isa);
void GemvF32(const float* x, int64_t M, int64_t K, const float* W, int64_t n0, int64_t n1, float* y,
             int64_t ldy);
void GemvBf16(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
              int64_t ldy);

}  // namespace pdserve
