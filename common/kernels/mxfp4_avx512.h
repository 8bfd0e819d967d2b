// AVX-512 builds of mxfp4.h's kernels, the same arguments and the same
// result bits as the AVX2 builds (mxfp4.h's summation order). Call only
// where the CPU has them (Mxfp4FmaAvx512Available, Mxfp4DotAvx512Available);
// GemvMxfp4Fma and GemvMxfp4Dot dispatch here on their own.
//
// GemvMxfp4FmaAvx512 (AVX-512F): a block's 16 bytes zero-extended to 16
// dword lanes; vpermps reads the low 4 bits of each as the index into the
// 16 FP4 values times the block's scale (the even elements), and again
// after a shift by 4 (the odd ones). The 16 Fma lanes are one zmm per row
// of x, reduced as the AVX2 build's two halves (lanes i + i+8, then its tree).
//
// GemvMxfp4DotAvx512 (AVX-512 F/BW/VL + VNNI): two blocks per zmm (block b
// in dword lanes 0-7, b + 1 in 8-15, each as [low nibbles | high nibbles]
// through vpshufb's table of doubled values), against x + 128 as u8
// (vpdpbusd) from an int32 start of -128 * sum(w) per lane, so each lane is
// the exact int sum of 4 products, as vpmaddubsw + vpmaddwd's lanes in the
// AVX2 build. The fp32 accumulator's lanes 0-7 take the even blocks and 8-15
// the odd ones, as the AVX2 build's two accumulators. One weight row per
// pass for one row of x, 4 for 2, 2 for 3-4 (as gemv_q8_avx512.h).
//
// GemmMxfp4FmaAvx512 (AVX-512F): GemvMxfp4FmaAvx512's bits for any M
// (mxfp4.h, GemmMxfp4Fma). x in chunks of up to 64 rows (of equal size);
// per chunk and 4 weight rows: FmaRow's even and odd values of every block
// stored once to a thread-local fp32 scratch (4 x K), then the chunk's rows
// against them 5 at a time (4 x 5 zmm accumulators, the 8 weight vectors of
// a block in registers; the last 1-4 rows as one smaller tile), 1024
// elements of k at a time (that slice of x stays in L2, of the weights in
// L1; the accumulators wait in memory between slices: exact). A last 1-3
// weight rows go one by one. The weights are decoded once per chunk.
#pragma once

#include <cstdint>

#include "common/kernels/mxfp4.h"

namespace pdserve {

void GemvMxfp4FmaAvx512(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                        int64_t ldy);
void GemvMxfp4DotAvx512(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0,
                        int64_t n1, float* y, int64_t ldy);
void GemmMxfp4FmaAvx512(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                        int64_t ldy);

}  // namespace pdserve
