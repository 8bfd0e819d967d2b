// Decode kernel for bf16 weights with bf16 activations, the `dot` choice of
// --bf16-matmul (bf16_matmul.h) on CPUs with AVX512-BF16:
//   GemvBf16DotAvailable  AVX-512 F/BW/VL + AVX512_BF16, and PDSERVE_ISA
//                         not forcing avx2
//   GemvBf16Dot           y = bf16(x) W^T for output columns [n0, n1)
//   Bf16DotStride, RoundRowsToBf16, GemvBf16DotRounded
//                         the same in two steps, for a caller that rounds
//                         many rows of x once and passes them over many
//                         weight tiles (a prefill GEMM, bf16_matmul.h)
//
// How: each row of x is rounded to bf16 (nearest even) once per call, then
// vdpbf16ps multiplies 32 bf16 pairs into 16 fp32 lanes in one instruction,
// where the exact path (gemv_kernels.h) widens 16 weights with two integer
// ops and spends one FMA per 16 products. The products of two bf16 values
// are exact in fp32; only the rounding of x differs from the exact path, as
// in llama.cpp's BF16 matmuls. 4 weight rows per pass against 2-4 rows of
// x (up to 16 accumulators), one weight row per pass against one row of x
// (each row read whole and in order, which DRAM feeds faster), a software
// prefetch GemvPrefetchBytes() ahead.
//
// Bits: lane j of an output's accumulator takes k = 2j, 2j + 1 of every
// 32-block in increasing k (a tail shorter than 32 masked to zeros), then a
// fixed reduction tree: an output's bits depend neither on M nor on which
// rows share its pass (batch invariance holds in this mode too).
#pragma once

#include <cstdint>

namespace pdserve {

bool GemvBf16DotAvailable();

// m < M <= kGemvMaxRows (gemv_kernels.h): y[m * ldy + n] = sum_k bf16(x[m * K + k]) * W[n * K + k].
// W is bf16 as raw uint16. Call only where GemvBf16DotAvailable().
void GemvBf16Dot(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
                 int64_t ldy);

// The row stride of rounded x: K rounded up to a multiple of 32.
inline int64_t Bf16DotStride(int64_t K) { return (K + 31) / 32 * 32; }
// out[m * Bf16DotStride(K) + k] = bf16(x[m * K + k]), zeros past K.
void RoundRowsToBf16(const float* x, int64_t M, int64_t K, uint16_t* out);
// GemvBf16Dot on rows already rounded by RoundRowsToBf16 (M <= kGemvMaxRows).
void GemvBf16DotRounded(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1,
                        float* y, int64_t ldy);

}  // namespace pdserve
