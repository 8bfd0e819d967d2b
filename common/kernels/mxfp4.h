// Decode kernels for MXFP4 weights as gpt-oss checkpoints store them (the
// experts' *_blocks and *_scales, docs/model.md "gpt-oss checkpoints"):
// y = W x (+ bias) for a few rows of x, reading FP4 codes and e8m0 scales
// directly (never widened to bf16 or fp32 in memory), each weight byte once
// per pass.
//
// Layout of W [N out, K in], K a multiple of 32: `blocks` U8 [N, K/32, 16]
// and `scales` U8 [N, K/32]. Byte j of a row's block b holds element
// 32b + 2j in its LOW nibble and 32b + 2j + 1 in its HIGH nibble; a nibble
// is an FP4 e2m1 code (kFp4Values); the block's 32 values are multiplied
// by 2^(scales[n, b] - 127) (E8m0Value).
//
// Contents:
//   constants, Mxfp4RowBytes/Mxfp4RowScales, kFp4Values, E8m0Value
//   Mxfp4Matrix                     a matrix as stored (+ optional fp32 bias)
//   DequantizeRowMxfp4              one row as fp32 (exact where finite)
//   GemvMxfp4Reference              the scalar reference of the fp32-x kernel,
//                                   on plain x, in the kernels' summation order
//   GemvMxfp4DotReference           the same for the int8-x kernel
//   PackRowsMxfp4, QuantizeRowsMxfp4  x in the order the kernels read it
//   GemvMxfp4Fma, GemvMxfp4Dot      the kernels (AVX2, AVX-512), run-time dispatch
//   GemmMxfp4Fma                    GemvMxfp4Fma's bits for any number of rows
//                                   (prefill): each weight decoded once per call
//   Mxfp4KernelName                 which build runs
//
// Two kernels:
// - GemvMxfp4Fma: x stays fp32. A block's 16 codes of each nibble go
//   through a 16-entry table of the FP4 values times the block's scale (an
//   exact power of two, so each weight is the exact product v * 2^(s-127),
//   as DequantizeRowMxfp4 gives it) and are FMA'd with x. Its result is
//   bit for bit GemvMxfp4Reference's, in both builds (AVX2: an 8-entry
//   vpermps plus the sign bit; AVX-512F: one 16-entry vpermps). x comes
//   packed (PackRowsMxfp4: per block the even elements, then the odd ones),
//   so that the low and high nibbles of byte l meet their x in lane l with
//   no shuffle per row of x.
// - GemvMxfp4Dot: x quantized per block of 32 to int8 (QuantizeRowsQ8, as
//   llama.cpp's MXFP4 x Q8_0), the codes mapped by vpshufb to int8 twice
//   their value (0, 1, 2, 3, 4, 6, 8, 12 and negatives: exact), x packed
//   the same way (QuantizeRowsMxfp4), an exact
//   int32 dot per group of 4 (AVX2: vpmaddubsw + vpmaddwd; AVX-512 VNNI:
//   vpdpbusd with x offset by 128), scaled by d_x * 2^(s-128) in fp32. Bit
//   for bit GemvMxfp4DotReference's in both builds. It adds the rounding of
//   x: |y_dot - y_exact| <= sum over blocks of (d_x / 2) * sum |w| (d_x =
//   max|x_block| / 127, half a step per value) plus fp32 rounding, as
//   Q8_0 x Q8_0 does (mxfp4_test holds it to that bound).
//
// Summation order (both kernels' builds and their references; a y
// element's order depends neither on M, nor on [n0, n1), nor on the ISA):
// - Fma: 16 lanes l = 0..15, lane l taking byte l of every block: per block
//   t = w[2l] * x[2l] (rounded), t = fma(w[2l+1], x[2l+1], t),
//   acc[l] = acc[l] + t, blocks in increasing order; then h[i] = acc[i] +
//   acc[i+8] (i < 8) and the 8-lane tree of avx2::HorizontalSum:
//   ((h0+h4) + (h2+h6)) + ((h1+h5) + (h3+h7)); then + bias[n].
// - Dot: per block, 8 exact int32 sums of 4 products (q = 2v):
//   lane j < 4 over elements 8j, 8j+2, 8j+4, 8j+6, lane j >= 4 over
//   8(j-4)+1, +3, +5, +7 of the block (the even elements then the odd ones,
//   4 at a time); acc_{b mod 2}[j] = fma(float(sum_j), d_x * 2^(s-128),
//   acc_{b mod 2}[j]), blocks in increasing order; then acc_0 + acc_1 lane
//   by lane, the same 8-lane tree, + bias[n].
//
// Scales: e8m0 0 is 2^-127 (a subnormal fp32, exact); 1..254 are
// 2^-126..2^127; a weight past fp32's range (|v| * 2^(s-127) >= 2^128:
// s = 253 with |v| >= 4, s = 254 with |v| >= 2) is inf, as when widening
// to fp32. 255 is NaN (OCP MX v1.0): every y that reads such
// a block is NaN (in every path; which NaN bits is not specified). The
// loader refuses scales outside the range a checkpoint uses; the kernels
// take any byte without trapping. Bit equality between paths holds for
// every non-NaN result.
//
// No ATen here: AVX2+FMA builds in mxfp4.cc, AVX-512 ones in mxfp4_avx512.cc.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/kernels/gemv_kernels.h"

namespace pdserve {

inline constexpr int64_t kMxfp4Block = 32;       // values per block (one scale)
inline constexpr int64_t kMxfp4BlockBytes = 16;  // two FP4 codes a byte

// Bytes of one row of `blocks` (K / 2) and of `scales` (K / 32), K % 32 == 0.
inline constexpr int64_t Mxfp4RowBytes(int64_t K) { return K / kMxfp4Block * kMxfp4BlockBytes; }
inline constexpr int64_t Mxfp4RowScales(int64_t K) { return K / kMxfp4Block; }

// FP4 e2m1 code -> value: bit 3 is the sign.
inline constexpr float kFp4Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Twice the FP4 values, as int8 (the Dot kernels' weights; -0 is 0).
inline constexpr int8_t kFp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// e8m0 byte -> 2^(s - 127) as fp32, built from the exponent bits: s = 0 is
// the subnormal 2^-127, 255 is NaN.
inline float E8m0Value(uint8_t s) {
  const uint32_t bits = s == 0 ? 0x00400000u : s == 255 ? 0x7fc00000u : uint32_t{s} << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// E8m0Value(s) for s < 256, then [256 + s] = 2^(s - 128) (NaN at 255): the
// dot kernels' scale of a doubled code. Built once.
const float* E8m0Table();

// An MXFP4 matrix W [N, K] as stored: row n's blocks at blocks + n *
// Mxfp4RowBytes(K), its scales at scales + n * Mxfp4RowScales(K). bias: [N]
// fp32, or nullptr.
struct Mxfp4Matrix {
  const uint8_t* blocks = nullptr;
  const uint8_t* scales = nullptr;
  const float* bias = nullptr;
  int64_t K = 0;

  const uint8_t* row_blocks(int64_t n) const { return blocks + n * Mxfp4RowBytes(K); }
  const uint8_t* row_scales(int64_t n) const { return scales + n * Mxfp4RowScales(K); }
};

// Row n of W as K fp32 values: kFp4Values[code] * E8m0Value(scale), in order.
void DequantizeRowMxfp4(const Mxfp4Matrix& W, int64_t n, float* out);

// For output columns n in [n0, n1): y[m * ldy + n] = sum_k W[n, k] * x[m * K + k]
// (+ bias[n]), m < M (any M), x in its plain order, in the Fma summation
// order above: GemvMxfp4Fma's bits.
void GemvMxfp4Reference(const float* x, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                        int64_t ldy);
// The same with x quantized per block by QuantizeRowsQ8 (xq [M, K] in plain
// order, xs [M, K/32]), in the Dot summation order: GemvMxfp4Dot's bits.
void GemvMxfp4DotReference(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0,
                           int64_t n1, float* y, int64_t ldy);

// x [M, K] in the kernels' order: each block of 32 as its 16 even elements,
// then its 16 odd ones (the low nibbles' partners, then the high ones').
// Once per x, for every matrix and range it meets.
void PackRowsMxfp4(const float* x, int64_t M, int64_t K, float* xp);
// QuantizeRowsQ8(x) (gemv_q8.h: the same xs), xq in the same order.
void QuantizeRowsMxfp4(const float* x, int64_t M, int64_t K, int8_t* xq, float* xs);

// True when the CPU has AVX2 and FMA: the AVX2 builds run (GemvAvailable).
bool Mxfp4Available();
// The AVX-512 builds: Fma needs AVX-512F; Dot AVX-512 F/BW/VL + VNNI.
bool Mxfp4FmaAvx512Available();
bool Mxfp4DotAvx512Available();
// The build each kernel takes without `isa`: kAvx512 where available unless
// PDSERVE_ISA=avx2 (GemvDefaultIsa), else kAvx2; computed once.
GemvIsa GemvMxfp4FmaIsa();
GemvIsa GemvMxfp4DotIsa();

// For output columns n in [n0, n1): y[m * ldy + n] = (W x_m)[n] (+ bias[n]),
// m < M <= kGemvMaxRows (gemv_kernels.h), x from PackRowsMxfp4 (Fma) or
// QuantizeRowsMxfp4 (Dot). With `isa`: that build, which the CPU must have
// (Mxfp4Available, Mxfp4*Avx512Available). Without: GemvMxfp4*Isa(), or
// the scalar references where the CPU lacks AVX2. Each prefetches its
// weight rows GemvPrefetchBytes() ahead.
void GemvMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy, GemvIsa isa);
void GemvMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy);
void GemvMxfp4Dot(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1,
                  float* y, int64_t ldy, GemvIsa isa);
void GemvMxfp4Dot(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1,
                  float* y, int64_t ldy);

// GemvMxfp4Fma's result, bit for bit, for any M (x from PackRowsMxfp4):
// y[m * ldy + n] = (W x_m)[n] (+ bias[n]) for n in [n0, n1), m < M. The
// AVX-512F build (GemmMxfp4FmaAvx512, mxfp4_avx512.h) decodes 4 weight
// rows at a time once (per chunk of up to 64 rows of x) into a thread-local
// fp32 scratch, in the packed order (per block the 16 even elements, then
// the 16 odd ones: the exact values kFp4Values[code] * E8m0Value(scale) that
// the Fma kernel's table gives), then runs the rows of x against them with
// 4 x 5 zmm accumulators, in the Fma summation order; worth it past
// kGemvMaxRows rows (prefill). The AVX2
// build and the scalar path run GemvMxfp4Fma per kGemvMaxRows rows (the
// same bits). With `isa`: that build, which the CPU must have.
void GemmMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy, GemvIsa isa);
void GemmMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy);

// What the kernels run without `isa` on this CPU, for logs and benches:
// "fma avx512", "fma avx2" or "fma scalar"; "dot avx512-vnni", "dot avx2"
// or "dot scalar".
enum class Mxfp4Kernel { kFma, kDot };
const char* Mxfp4KernelName(Mxfp4Kernel kernel);

}  // namespace pdserve
