// Decode kernel for bf16 weights in a k-major copy packed at load, the
// `kmajor` choice of --bf16-matmul (bf16_matmul.h):
//   KMajorElements   uint16 elements of the pack of W [N, K]
//   PackBf16KMajor   W [N, K] (row-major bf16) -> its pack, groups [g0, g1)
//   GemvBf16KMajor   y = x W^T for output columns [n0, n1), any number of
//                    rows of x, from the pack
//   GemvBf16KMajorDot  the same with x rounded to bf16 and vdpbf16ps (the
//                    `dot` choice where packs exist; AVX512_BF16 only);
//                    ...Rounded takes x already rounded
//   WidenKMajorT     W^T [K, ldw] in fp32 from the pack, groups [g0, g1)
//                    (prefill's GEMMs where the pack is the only copy)
//   WidenKMajorRow   row n of W in fp32 from the pack (an embedding lookup)
//
// Layout: W's rows (the outputs) in groups of kKMajorGroup = 32, N padded
// with zero rows to a multiple of 32. Group g holds, for k = 0 .. K-1 in
// order, the 32 values W[32g + j][k], j = 0..31: one 64-byte line per k.
// A vector holds 16 (AVX-512) or 8 (AVX2) outputs at one k, and x[m][k] is
// broadcast; a pass keeps MR rows of x × 1-4 groups in registers over all
// of k and stores them with no reduction (MR up to 8 on AVX-512, 2 on
// AVX2). A widened weight vector serves MR rows of x (MR FMAs), where the
// row layout's kernel (gemv_kernels.h) spends a load of x per FMA and
// reduces every output at the end; rows past the first MR re-read a block
// of 4 groups from L2 (docs/benchmarks.md §5).
//
// Bits: each output is one chain of fp32 FMAs, acc = fma(W[n][k], x[m][k],
// acc) from acc = 0 over k = 0 .. K-1 in order. So an output's bits depend
// on neither the number of rows of x, the rows beside it, the split of
// [n0, n1), nor the build (AVX-512 and AVX2 give the same bits); the
// products are exact (bf16 widens exactly). The order differs from the row
// kernels' (gemv_kernels.h), so this mode's logits differ from widen's in
// the last bits, as dot's do.
//
// No ATen here (compiled with target pragmas, as gemv_kernels.cc).
#pragma once

#include <cstdint>

#include "common/kernels/gemv_kernels.h"

namespace pdserve {

inline constexpr int64_t kKMajorGroup = 32;

inline int64_t KMajorGroups(int64_t N) { return (N + kKMajorGroup - 1) / kKMajorGroup; }
inline int64_t KMajorElements(int64_t N, int64_t K) { return KMajorGroups(N) * kKMajorGroup * K; }

// Writes groups [g0, g1) of W's pack into out (KMajorElements(N, K)
// elements for the whole pack; groups are independent, so callers may
// split them across threads).
void PackBf16KMajor(const uint16_t* W, int64_t N, int64_t K, int64_t g0, int64_t g1, uint16_t* out);

// y[m * ldy + n] = sum_k x[m * K + k] * W[n * K + k] for m < M (any M >= 0)
// and n in [n0, n1) (0 <= n0 <= n1 <= N), from W's pack P. Without `isa`:
// GemvDefaultIsa(). Callers split [n0, n1) at multiples of kKMajorGroup
// for speed (a group cut by a split is computed by both sides).
void GemvBf16KMajor(const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0, int64_t n1,
                    float* y, int64_t ldy, GemvIsa isa);
void GemvBf16KMajor(const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0, int64_t n1,
                    float* y, int64_t ldy);

// y[m * ldy + n] = sum_k bf16(x[m * K + k]) * W[n * K + k], as
// GemvBf16KMajor's contract. x is rounded to bf16 (nearest even) once per
// call; lines k and k + 1 of a group interleave into pairs (vpunpck{l,h}wd)
// and one vdpbf16ps adds two products per output: half the instructions
// of the exact pass per product, and no widening. Bits: lane n's chain
// takes k = 2p, 2p + 1 for p = 0, 1, .. in order from 0 (an odd K's last k
// pairs with zero): they depend neither on M, the rows beside a row, nor
// the split of [n0, n1); they differ from GemvBf16Dot's (row layout, other
// order). Call only where GemvBf16DotAvailable() (gemv_bf16dot.h).
void GemvBf16KMajorDot(const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0, int64_t n1,
                       float* y, int64_t ldy);
// The same on rows already rounded by RoundRowsToBf16 (gemv_bf16dot.h):
// xb [M, Bf16DotStride(K)], for a caller that rounds once and passes the
// rows over many column ranges.
void GemvBf16KMajorDotRounded(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0,
                              int64_t n1, float* y, int64_t ldy);

// The two widenings need AVX2 + FMA (GemvAvailable(), as packs do).
// wt[k * ldw + n] = W[n][k] exactly widened, for k < K and n in the groups
// [g0, g1) (n < KMajorGroups(N) * kKMajorGroup: padding rows give zeros);
// ldw >= that padded N. Groups are independent (callers may split them).
void WidenKMajorT(const uint16_t* P, int64_t K, int64_t g0, int64_t g1, float* wt, int64_t ldw);

// out[k] = W[n][k] exactly widened, k < K.
void WidenKMajorRow(const uint16_t* P, int64_t K, int64_t n, float* out);

}  // namespace pdserve
