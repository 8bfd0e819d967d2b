// Decode kernel for int8 weights in a k-major copy of their Q8_0 values,
// packed at load (the int8 counterpart of gemv_kmajor.h):
//   Q8KMajorBytes      bytes of the pack of a Q8_0 W [N, K]
//   PackQ8KMajor       W (Q8_0 rows, gemv_q8.h) -> its pack, groups [g0, g1)
//   GemvQ8KMajorDot    y = x W^T for output columns [n0, n1), any number of
//                      rows of x quantized per block of 32 (QuantizeRowsQ8),
//                      with vpdpbusd (AVX-512 VNNI) or vpmaddubsw (AVX2)
//   DequantizeQ8KMajorRow  row n of W in fp32 from the pack (prefill's
//                      GEMMs and the embedding, where the pack is the only copy)
//
// Layout: W's rows (the outputs) in groups of kKMajorGroup = 32
// (gemv_kmajor.h: KMajorGroups(N) groups, as the bf16 packs), N padded with
// zero rows to a multiple of 32. Group g holds, for each block b of 32
// k in order, 1088 bytes (the 32 rows' Q8_0 blocks, 32 × 34 bytes):
//   - the 32 fp16 scales d of W[32g + j] block b, j = 0..31 (64 bytes);
//   - for each quad q = 0..7 of the block (k = 32b + 4q .. +3), two
//     64-byte lines, outputs j = 0..15 then 16..31, four bytes per output:
//     q + 128 (the int8 value with its sign bit flipped, unsigned).
// A line is 16 int32 lanes of four (k, k+1, k+2, k+3) weights, what
// vpdpbusd multiplies by one broadcast quad of x: one instruction adds 64
// products to 16 outputs, with no reduction at the end, where the row
// layout's kernel (gemv_q8_avx512.h) adds 64 products to one output and
// reduces every output.
//
// Why the weights are the unsigned side: vpdpbusd takes u8 × s8, and
// (q + 128) · x = q · x + 128 · sum(x). The correction 128 · sum(x) per
// row of x and block is computed once per call and is the int32 sums'
// starting value, so they hold sum(q · x) exactly. (The row layout makes x
// unsigned instead, which costs a correction per weight block.) The AVX2
// build reads the same lines as ymm of 8 outputs and multiplies |q| by x
// with q's sign (vpsignb, vpmaddubsw, vpmaddwd, vpaddd: 4 instructions where
// VNNI has 1 for twice the products), as llama.cpp's AVX2 Q8_0 dot does.
//
// Bits: output n's fp32 accumulator takes, for b = 0 .. K/32 - 1 in order,
// acc = fma(float(sum_b), d_w * d_x, acc) from 0, sum_b the exact int32 dot
// of block b. So its bits depend on neither the number of rows of x, the
// rows beside it, the split of [n0, n1), nor the build (AVX2 == AVX-512).
// The order differs from the row layout's (which converts each 4-product
// lane to fp32), so this kernel's logits differ from GemvQ8Dot's in the
// last bits.
//
// No ATen here (compiled with target pragmas, as gemv_q8_avx512.cc).
#pragma once

#include <cstdint>

#include "common/kernels/gemv_kernels.h"

namespace pdserve {

// Bytes of the pack of a Q8_0 W [N, K] (K % 32 == 0).
int64_t Q8KMajorBytes(int64_t N, int64_t K);

// Writes groups [g0, g1) of W's pack into out (Q8KMajorBytes(N, K) bytes
// for the whole pack; groups are independent, so callers may split them
// across threads). W: N Q8_0 rows of K values (Q8RowBytes(K) bytes each).
void PackQ8KMajor(const uint8_t* W, int64_t N, int64_t K, int64_t g0, int64_t g1, uint8_t* out);

// y[m * ldy + n] = sum_b d_w[n][b] * d_x[m][b] * sum_{k in b} q_w[n][k] *
// xq[m][k] for m < M (any M >= 0) and n in [n0, n1) (0 <= n0 <= n1 <= N),
// from W's pack P; xq [M, K] (values in [-127, 127]) and xs [M, K/32] as
// QuantizeRowsQ8 (gemv_q8.h) writes them. Without `isa`: GemvQ8DotIsa()
// (gemv_q8.h). Call only where GemvQ8Available(), and with kAvx512 only
// where GemvQ8VnniAvailable(). M == 1 runs the AVX2 build under kAvx512
// too (the same bits; a single stream that build keeps at least as fast:
// batch-1 int8 decode +11% median on a Zen 4, docs/benchmarks.md §7).
// Callers split [n0, n1) at multiples of 32 for speed (a group cut by a
// split is computed by both sides).
void GemvQ8KMajorDot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* P, int64_t N,
                     int64_t n0, int64_t n1, float* y, int64_t ldy);
void GemvQ8KMajorDot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* P, int64_t N,
                     int64_t n0, int64_t n1, float* y, int64_t ldy, GemvIsa isa);

// out[k] = d * q of W[n][k], k < K (n < N): the values DequantizeQ8
// (linear_int8.h) gives for the row-major matrix.
void DequantizeQ8KMajorRow(const uint8_t* P, int64_t K, int64_t n, float* out);

}  // namespace pdserve
