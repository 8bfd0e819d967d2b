// Decode kernels for int8 weights in the Q8_0 layout: y = x W^T for a few
// rows of x, reading each weight row once.
//
// Q8_0 layout of one weight row of K values (K a multiple of 32): K/32
// blocks of 34 bytes, each an fp16 scale d followed by 32 int8 values q, the
// weights being d * q (llama.cpp's block_q8_0). A [N, K] matrix is N such
// rows back to back.
//
// Two kernels:
// - GemvQ8Fma: x stays fp32; each block is widened to fp32
//   and FMA'd with x, and the block sum scaled by d.
// - GemvQ8Dot: x is quantized per block of 32 to int8 too (QuantizeRowsQ8),
//   and each block is an int8 dot product (vpmaddubsw + vpmaddwd), then
//   scaled by d_w * d_x in fp32 (llama.cpp's Q8_0 x Q8_0). Adds the
//   activations' rounding error. Two builds with the same result bits:
//   AVX2 (vpmaddubsw + vpmaddwd; not faster than GemvQ8Fma at batch <= 4;
//   the default reads k-major packs instead, gemv_q8_kmajor.h) and AVX-512
//   VNNI (vpdpbusd, gemv_q8_avx512.h), taken where the CPU has it unless
//   PDSERVE_ISA=avx2 (GemvQ8DotIsa).
// In both, a y element's summation order does not depend on M, so a
// sequence's tokens do not depend on its decode batch.
// Both prefetch each weight row GemvPrefetchBytes() ahead (gemv_kernels.h).
//
// No ATen here: compiled for AVX2+FMA+F16C.
#pragma once

#include <cstdint>

#include "common/kernels/gemv_kernels.h"

namespace pdserve {

inline constexpr int64_t kQ8Block = 32;       // values per block
inline constexpr int64_t kQ8BlockBytes = 34;  // fp16 scale + 32 int8

// Bytes of one Q8_0 row of K values (K % kQ8Block == 0).
inline constexpr int64_t Q8RowBytes(int64_t K) { return K / kQ8Block * kQ8BlockBytes; }

// True when the CPU has AVX2, FMA and F16C (checked once at run time).
bool GemvQ8Available();

// True when the CPU (and OS) can also run GemvQ8Dot's AVX-512 build:
// AVX-512 F/BW/VL and AVX512_VNNI (cpu_features.h).
bool GemvQ8VnniAvailable();
// The build GemvQ8Dot takes without `isa`: kAvx512 where
// GemvQ8VnniAvailable() unless PDSERVE_ISA=avx2 (GemvDefaultIsa), else
// kAvx2; computed once.
GemvIsa GemvQ8DotIsa();

// x quantized per block of 32: for each row m < M and block b,
// xs[m * K/32 + b] = max|x| / 127 and xq[m * K + k] = x * (1 / xs) rounded
// half to even (0 when the block is all zeros). K % 32 == 0. AVX2 where the
// CPU has it, else scalar; the same bytes.
void QuantizeRowsQ8(const float* x, int64_t M, int64_t K, int8_t* xq, float* xs);

// For output columns n in [n0, n1): y[m * ldy + n] = sum_k x[m, k] * W[n, k],
// m < M <= kGemvMaxRows (gemv_kernels.h), W in the Q8_0 layout. GemvQ8Dot
// without `isa`: GemvQ8DotIsa(); kAvx512 only where GemvQ8VnniAvailable().
void GemvQ8Dot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* W, int64_t n0,
               int64_t n1, float* y, int64_t ldy, GemvIsa isa);
void GemvQ8Dot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* W, int64_t n0,
               int64_t n1, float* y, int64_t ldy);
void GemvQ8Fma(const float* x, int64_t M, int64_t K, const uint8_t* W, int64_t n0, int64_t n1, float* y,
               int64_t ldy);

}  // namespace pdserve
