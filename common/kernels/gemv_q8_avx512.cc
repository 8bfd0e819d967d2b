#include "common/kernels/gemv_q8_avx512.h"

#include <immintrin.h>

#include <cstring>

#include "common/kernels/avx2_util.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8.h"

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Lanes 0-7 = v[0], lanes 8-15 = v[1].
inline __m512 Spread2(__m128 v) {
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

// kTwo: blocks b and b + 1 (lanes 0-7 and 8-15); else block b alone, lanes
// 8-15 zero (the odd last block).

// The fp16 weight scales, widened (as _cvtsh_ss does).
template <bool kTwo>
inline __m512 WeightScales(const uint8_t* blk) {
  uint16_t h0 = 0, h1 = 0;
  std::memcpy(&h0, blk, 2);
  if (kTwo) std::memcpy(&h1, blk + kQ8BlockBytes, 2);
  return Spread2(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<uint32_t>(h1) << 16)))));
}

inline __m512 XScales(const float* p, bool two) {
  // Two floats as one unaligned 64-bit load (_mm_load_sd on a float pointer
  // is a misaligned double load to UBSan).
  return Spread2(two ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))) : _mm_load_ss(p));
}

// The int8 weights (each block's 32 after its 2-byte scale).
template <bool kTwo>
inline __m512i Weights(const uint8_t* blk) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  if (!kTwo) return _mm512_inserti64x4(_mm512_setzero_si512(), lo, 0);
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ8BlockBytes + 2));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// x + 128 as u8 (bytes 32-63 of a lone block: 128, against zero weights).
template <bool kTwo>
inline __m512i OffsetX(const int8_t* p) {
  const __m512i v = kTwo ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p);
  return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
}

// Blocks b (and b + 1) of R weight rows (rb bytes apart) against M rows of
// x, into acc[r][m]. The int32 lanes start at -128 * sum(w) of their 4
// weights, so vpdpbusd with x + 128 leaves sum(x * w), exactly.
template <int R, int M, bool kTwo>
inline void Step(const int8_t* xq, const float* xs, int64_t K, int64_t b, const uint8_t* w, int64_t rb,
                 int64_t pf, __m512 (&acc)[R][M]) {
  const int64_t nb = K / kQ8Block;
  const __m512i zero = _mm512_setzero_si512(), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i xu[M];
  __m512 xd[M];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
    xu[m] = OffsetX<kTwo>(xq + m * K + b * kQ8Block);
    xd[m] = XScales(xs + m * nb + b, kTwo);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const uint8_t* blk = w + r * rb + b * kQ8BlockBytes;
    if (pf > 0) {
      _mm_prefetch(reinterpret_cast<const char*>(blk) + pf, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(blk) + pf + 64, _MM_HINT_T0);
    }
    const __m512i wv = Weights<kTwo>(blk);
    const __m512i base = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, wv));
    const __m512 dw = WeightScales<kTwo>(blk);
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, xu[m], wv));
      const __m512 d = _mm512_mul_ps(dw, xd[m]);
      acc[r][m] = kTwo ? _mm512_fmadd_ps(dot, d, acc[r][m]) : _mm512_mask3_fmadd_ps(dot, d, acc[r][m], 0xFF);
    }
  }
}

// The AVX2 kernel's reduction: (even blocks) + (odd blocks), then its tree.
inline float Reduce(__m512 acc) {
  const __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return avx2::HorizontalSum(_mm256_add_ps(lo, hi));
}

// R consecutive weight rows against M rows of x; outputs y_col[m * ldy + r].
template <int R, int M>
void Block(const int8_t* xq, const float* xs, int64_t K, const uint8_t* w, float* y_col, int64_t ldy, int64_t pf) {
  const int64_t nb = K / kQ8Block, rb = Q8RowBytes(K);
  __m512 acc[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R * M; ++i) acc[i / M][i % M] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) Step<R, M, true>(xq, xs, K, b, w, rb, pf, acc);
  if (b < nb) Step<R, M, false>(xq, xs, K, b, w, rb, pf, acc);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) y_col[m * ldy + r] = Reduce(acc[r][m]);
  }
}

// One weight row per pass for one row of x (each row read whole and in
// order: four interleaved rows streamed ~25% slower from DRAM on the Zen 5
// EPYC, docs/benchmarks.md §7); 4 rows per pass for 2 rows of x
// (they share each x load), 2 past that (32 zmm registers). Same bits.
template <int M>
void Rows(const int8_t* xq, const float* xs, int64_t K, const uint8_t* W, int64_t n0, int64_t n1, float* y,
          int64_t ldy) {
  constexpr int R = M == 1 ? 1 : M == 2 ? 4 : 2;
  const int64_t rb = Q8RowBytes(K), pf = GemvPrefetchBytes();
  int64_t n = n0;
  for (; n + R <= n1; n += R) Block<R, M>(xq, xs, K, W + n * rb, y + n, ldy, pf);
  for (; n < n1; ++n) Block<1, M>(xq, xs, K, W + n * rb, y + n, ldy, pf);
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

void GemvQ8DotAvx512(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* W, int64_t n0,
                     int64_t n1, float* y, int64_t ldy) {
  switch (M) {
    case 1: return Rows<1>(xq, xs, K, W, n0, n1, y, ldy);
    case 2: return Rows<2>(xq, xs, K, W, n0, n1, y, ldy);
    case 3: return Rows<3>(xq, xs, K, W, n0, n1, y, ldy);
    case 4: return Rows<4>(xq, xs, K, W, n0, n1, y, ldy);
    default: return;
  }
}

}  // namespace pdserve
