#include "common/kernels/mxfp4_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "common/kernels/avx2_util.h"
#include "common/kernels/gemv_kernels.h"

namespace pdserve {
namespace {

inline float AddBias(float s, const float* bias, int64_t n) { return bias != nullptr ? s + bias[n] : s; }

// One line of blocks per 4 blocks, one of scales per 64 (b: a block index
// of the row). Inlined early: GCC 12 otherwise finds a function of
// prefetches alone free of side effects and drops its calls.
__attribute__((always_inline)) inline void Prefetch(const uint8_t* blocks, const uint8_t* scales, int64_t b,
                                                   int64_t pf) {
  if (pf <= 0 || (b & 3) != 0) return;
  _mm_prefetch(reinterpret_cast<const char*>(blocks + b * kMxfp4BlockBytes) + pf, _MM_HINT_T0);
  if ((b & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(scales + b) + pf / 16, _MM_HINT_T0);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// The AVX2 build's reduction: lanes i + i+8, then its tree.
inline float Reduce(__m512 acc) {
  const __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return avx2::HorizontalSum(_mm256_add_ps(lo, hi));
}

// Row n against M packed rows of x: per block t = even * x_even, t =
// fma(odd, x_odd, t), acc += t, lane l from byte l.
template <int M>
void FmaRow(const float* xp, const Mxfp4Matrix& W, int64_t n, const float* table, float* y_col, int64_t ldy,
            int64_t pf) {
  const int64_t K = W.K, nb = Mxfp4RowScales(K);
  const uint8_t* blocks = W.row_blocks(n);
  const uint8_t* scales = W.row_scales(n);
  const __m512 values = _mm512_loadu_ps(kFp4Values);
  __m512 acc[M];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    Prefetch(blocks, scales, b, pf);
    const __m512 lut = _mm512_mul_ps(values, _mm512_set1_ps(table[scales[b]]));
    const __m512i idx = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + b * kMxfp4BlockBytes)));
    const __m512 even = _mm512_permutexvar_ps(idx, lut);  // reads bits 0-3: the low nibble
    const __m512 odd = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), lut);
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const float* xb = xp + m * K + b * kMxfp4Block;
      __m512 t = _mm512_mul_ps(even, _mm512_loadu_ps(xb));
      t = _mm512_fmadd_ps(odd, _mm512_loadu_ps(xb + 16), t);
      acc[m] = _mm512_add_ps(acc[m], t);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) y_col[m * ldy] = AddBias(Reduce(acc[m]), W.bias, n);
}

template <int M>
void FmaRows(const float* xp, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t pf = GemvPrefetchBytes();
  const float* table = E8m0Table();
  for (int64_t n = n0; n < n1; ++n) FmaRow<M>(xp, W, n, table, y + n, ldy, pf);
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

inline float ReduceDot(__m512 acc) {
  const __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return avx2::HorizontalSum(_mm256_add_ps(lo, hi));
}

// Lanes 0-7 = v[0], lanes 8-15 = v[1].
inline __m512 Spread2(__m128 v) {
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

// kTwo: blocks b and b + 1 (bytes 0-31 and 32-63; dword lanes 0-7 and
// 8-15); else block b alone, bytes 32-63 zero (the odd last block).

// The doubled codes as int8, each block as [16 low nibbles | 16 high ones]:
// its 16 bytes in two 128-bit lanes, shifted by 0 and 4, masked, looked up.
template <bool kTwo>
inline __m512i DoubledCodes(const uint8_t* q, __m512i lut) {
  __m512i z;
  if (kTwo) {
    const __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    z = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(1, 1, 0, 0));
  } else {
    z = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  }
  const __m512i shifts = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
  const __m512i codes = _mm512_and_si512(_mm512_srlv_epi32(z, shifts), _mm512_set1_epi8(0x0F));
  return kTwo ? _mm512_shuffle_epi8(lut, codes) : _mm512_maskz_shuffle_epi8(0xFFFFFFFFull, lut, codes);
}

// 2^(s - 128) of the blocks' scale bytes.
template <bool kTwo>
inline __m512 WeightScales(const uint8_t* s, const float* half) {
  const __m128 a = _mm_load_ss(half + s[0]);
  return Spread2(kTwo ? _mm_unpacklo_ps(a, _mm_load_ss(half + s[1])) : a);
}

inline __m512 XScales(const float* p, bool two) {
  // Two floats as one unaligned 64-bit load (as gemv_q8_avx512.cc).
  return Spread2(two ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))) : _mm_load_ss(p));
}

// x + 128 as u8 (bytes 32-63 of a lone block: 128, against zero weights).
template <bool kTwo>
inline __m512i OffsetX(const int8_t* p) {
  const __m512i v = kTwo ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p);
  return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
}

// Blocks b (and b + 1) of R weight rows from row n against M rows of x,
// into acc[r][m].
template <int R, int M, bool kTwo>
inline void DotStep(const int8_t* xq, const float* xs, const Mxfp4Matrix& W, int64_t n, int64_t b,
                    const float* half, __m512i lut, int64_t pf, __m512 (&acc)[R][M]) {
  const int64_t K = W.K, nb = Mxfp4RowScales(K);
  const __m512i zero = _mm512_setzero_si512(), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i xu[M];
  __m512 xd[M];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
    xu[m] = OffsetX<kTwo>(xq + m * K + b * kMxfp4Block);
    xd[m] = XScales(xs + m * nb + b, kTwo);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const uint8_t* blocks = W.row_blocks(n + r);
    const uint8_t* scales = W.row_scales(n + r);
    Prefetch(blocks, scales, b, pf);  // b even: every other step
    const __m512i w = DoubledCodes<kTwo>(blocks + b * kMxfp4BlockBytes, lut);
    const __m512i base = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, w));
    const __m512 dw = WeightScales<kTwo>(scales + b, half);
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, xu[m], w));
      const __m512 d = _mm512_mul_ps(dw, xd[m]);
      acc[r][m] = kTwo ? _mm512_fmadd_ps(dot, d, acc[r][m]) : _mm512_mask3_fmadd_ps(dot, d, acc[r][m], 0xFF);
    }
  }
}

// R consecutive weight rows from row n against M rows of x; outputs
// y_col[m * ldy + r].
template <int R, int M>
void DotBlock(const int8_t* xq, const float* xs, const Mxfp4Matrix& W, int64_t n, const float* half, float* y_col,
              int64_t ldy, int64_t pf) {
  const int64_t nb = Mxfp4RowScales(W.K);
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4Doubled)));
  __m512 acc[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R * M; ++i) acc[i / M][i % M] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) DotStep<R, M, true>(xq, xs, W, n, b, half, lut, pf, acc);
  if (b < nb) DotStep<R, M, false>(xq, xs, W, n, b, half, lut, pf, acc);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) y_col[m * ldy + r] = AddBias(ReduceDot(acc[r][m]), W.bias, n + r);
  }
}

template <int M>
void DotRows(const int8_t* xq, const float* xs, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
             int64_t ldy) {
  constexpr int R = M == 1 ? 1 : M == 2 ? 4 : 2;
  const int64_t pf = GemvPrefetchBytes();
  const float* half = E8m0Table() + 256;
  int64_t n = n0;
  for (; n + R <= n1; n += R) DotBlock<R, M>(xq, xs, W, n, half, y + n, ldy, pf);
  for (; n < n1; ++n) DotBlock<1, M>(xq, xs, W, n, half, y + n, ldy, pf);
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// ---------------------------------------------------------------- GEMM (Fma)

constexpr int kGemmRows = 4;        // weight rows decoded together (the microkernel's R)
constexpr int kGemmX = 5;           // rows of x per microkernel pass
constexpr int64_t kGemmK = 1024;    // elements of k per pass over x (32 blocks)
constexpr int64_t kGemmMRows = 64;  // rows of x per chunk: <= 256 KiB of x per kGemmK slice

// Rows [n, n + R) of W as fp32 in the packed order, row r at w + r * K: per
// block FmaRow's `even` then `odd` (the same table, the same permutes).
void DecodeRowsPacked(const Mxfp4Matrix& W, int64_t n, int R, const float* table, float* w) {
  const int64_t K = W.K, nb = Mxfp4RowScales(K);
  const __m512 values = _mm512_loadu_ps(kFp4Values);
  for (int r = 0; r < R; ++r) {
    const uint8_t* blocks = W.row_blocks(n + r);
    const uint8_t* scales = W.row_scales(n + r);
    float* out = w + r * K;
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 lut = _mm512_mul_ps(values, _mm512_set1_ps(table[scales[b]]));
      const __m512i idx = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + b * kMxfp4BlockBytes)));
      _mm512_storeu_ps(out + b * kMxfp4Block, _mm512_permutexvar_ps(idx, lut));
      _mm512_storeu_ps(out + b * kMxfp4Block + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), lut));
    }
  }
}

// Elements [k0, k1) of R decoded weight rows (w, row stride K) against M
// packed rows of x, in the Fma order: per block t = even * x_even, t =
// fma(odd, x_odd, t), acc += t. The R x M accumulators live in acc_io between
// calls (exact: a store and a load round nothing): zero when k0 == 0; at
// k1 == K reduced to y_col[m * ldy + r] (+ bias[n + r]).
template <int R, int M>
void GemmTile(const float* w, const float* xp, const Mxfp4Matrix& W, int64_t n, int64_t k0, int64_t k1,
              float* acc_io, float* y_col, int64_t ldy) {
  const int64_t K = W.K;
  __m512 acc[R][M];
#pragma GCC unroll 32
  for (int i = 0; i < R * M; ++i) acc[i / M][i % M] = k0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_io + 16 * i);
  for (int64_t k = k0; k < k1; k += kMxfp4Block) {
    __m512 we[R], wo[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      we[r] = _mm512_loadu_ps(w + r * K + k);
      wo[r] = _mm512_loadu_ps(w + r * K + k + 16);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xe = _mm512_loadu_ps(xp + m * K + k), xo = _mm512_loadu_ps(xp + m * K + k + 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m512 t = _mm512_mul_ps(we[r], xe);
        t = _mm512_fmadd_ps(wo[r], xo, t);
        acc[r][m] = _mm512_add_ps(acc[r][m], t);
      }
    }
  }
  if (k1 < K) {
#pragma GCC unroll 32
    for (int i = 0; i < R * M; ++i) _mm512_storeu_ps(acc_io + 16 * i, acc[i / M][i % M]);
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) y_col[m * ldy + r] = AddBias(Reduce(acc[r][m]), W.bias, n + r);
  }
}

// R decoded rows against M <= kGemmMRows rows of x, kGemmK elements at a
// time (that slice of x stays in L2, of w in L1), kGemmX rows of x at a
// time, then the rest. acc: R * M vectors of 16 floats.
template <int R>
void GemmRows(const float* w, const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n, float* acc, float* y,
              int64_t ldy) {
  const int64_t K = W.K;
  for (int64_t k0 = 0; k0 < K; k0 += kGemmK) {
    const int64_t k1 = std::min(K, k0 + kGemmK);
    int64_t m = 0;
    for (; m + kGemmX <= M; m += kGemmX) {
      GemmTile<R, kGemmX>(w, xp + m * K, W, n, k0, k1, acc + 16 * m * R, y + m * ldy + n, ldy);
    }
    const float* x = xp + m * K;
    float* yc = y + m * ldy + n;
    switch (M - m) {
      case 1: GemmTile<R, 1>(w, x, W, n, k0, k1, acc + 16 * m * R, yc, ldy); break;
      case 2: GemmTile<R, 2>(w, x, W, n, k0, k1, acc + 16 * m * R, yc, ldy); break;
      case 3: GemmTile<R, 3>(w, x, W, n, k0, k1, acc + 16 * m * R, yc, ldy); break;
      case 4: GemmTile<R, 4>(w, x, W, n, k0, k1, acc + 16 * m * R, yc, ldy); break;
      default: break;
    }
  }
}

// M <= kGemmMRows rows of x (their kGemmK slices stay in L2) against weight
// rows [n0, n1), 4 at a time decoded once here (a last 1-3 one by one).
void GemmChunk(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* w, float* acc,
               float* y, int64_t ldy) {
  const float* table = E8m0Table();
  int64_t n = n0;
  for (; n + kGemmRows <= n1; n += kGemmRows) {
    DecodeRowsPacked(W, n, kGemmRows, table, w);
    GemmRows<kGemmRows>(w, xp, M, W, n, acc, y, ldy);
  }
  for (; n < n1; ++n) {
    DecodeRowsPacked(W, n, 1, table, w);
    GemmRows<1>(w, xp, M, W, n, acc, y, ldy);
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

void GemvMxfp4FmaAvx512(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                        int64_t ldy) {
  switch (M) {
    case 1: return FmaRows<1>(xp, W, n0, n1, y, ldy);
    case 2: return FmaRows<2>(xp, W, n0, n1, y, ldy);
    case 3: return FmaRows<3>(xp, W, n0, n1, y, ldy);
    case 4: return FmaRows<4>(xp, W, n0, n1, y, ldy);
    default: return;
  }
}

void GemvMxfp4DotAvx512(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0,
                        int64_t n1, float* y, int64_t ldy) {
  switch (M) {
    case 1: return DotRows<1>(xq, xs, W, n0, n1, y, ldy);
    case 2: return DotRows<2>(xq, xs, W, n0, n1, y, ldy);
    case 3: return DotRows<3>(xq, xs, W, n0, n1, y, ldy);
    case 4: return DotRows<4>(xq, xs, W, n0, n1, y, ldy);
    default: return;
  }
}

void GemmMxfp4FmaAvx512(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                        int64_t ldy) {
  static_assert(kGemmX == 5, "GemmRows's remainder switch covers 1..4");
  if (M <= 0) return;
  // Reused, no allocation per call: kGemmRows decoded rows, their accumulators.
  thread_local std::vector<float> w, acc;
  w.resize(kGemmRows * W.K);
  acc.resize(16 * kGemmRows * kGemmMRows);
  // Chunks of x of equal size (up to kGemmMRows rows); the weights are
  // decoded again per chunk (a few per cent of the multiplies' time).
  const int64_t chunks = (M + kGemmMRows - 1) / kGemmMRows, rows = (M + chunks - 1) / chunks;
  for (int64_t m = 0; m < M; m += rows) {
    GemmChunk(xp + m * W.K, std::min(rows, M - m), W, n0, n1, w.data(), acc.data(), y + m * ldy, ldy);
  }
}

}  // namespace pdserve
