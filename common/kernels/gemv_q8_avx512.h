// AVX-512 VNNI build of gemv_q8.h's int8-dot kernel (Q8_0 weights against
// Q8_0-quantized x): GemvQ8DotAvx512, the same arguments and the same result
// bits as the AVX2 GemvQ8Dot. Call only where GemvQ8VnniAvailable()
// (gemv_q8.h); GemvQ8Dot dispatches here on its own.
//
// How: vpdpbusd multiplies u8 by s8 in groups of 4 into int32 lanes. x is
// made unsigned by an offset (x + 128, one xor per 64 values of a row of x,
// shared by every weight row), and each weight block's 128 * sum(w) (one
// more vpdpbusd per weight block, shared by every row of x) is the starting
// value of the dot, so the int32 lanes hold the exact sums of x * w. Two
// 32-blocks per zmm (block b in lanes 0-7, b + 1 in lanes 8-15), one weight
// row per pass for one row of x (read whole and in order, which DRAM feeds
// faster), 4 for 2 rows of x and 2 for 3-4 rows, a software prefetch
// GemvPrefetchBytes() ahead in each weight row.
//
// Bits: lane j of a block's int32 sum covers k = 4j..4j+3, as vpmaddubsw +
// vpmaddwd's lanes do in the AVX2 kernel (both exact); the fp32 accumulator's
// lanes 0-7 take the even blocks and lanes 8-15 the odd ones, as the AVX2
// kernel's two accumulators, each block scaled by d_w * d_x and FMA'd in
// increasing block order; the reduction is the AVX2 tree over (lanes 0-7) +
// (lanes 8-15). So a y element's summation order depends neither on M nor on
// the ISA (batch invariance, and an AVX2 machine decodes the same tokens).
#pragma once

#include <cstdint>

namespace pdserve {

void GemvQ8DotAvx512(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* W, int64_t n0,
                     int64_t n1, float* y, int64_t ldy);

}  // namespace pdserve
