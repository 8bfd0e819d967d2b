#include "common/kernels/gemv_avx512.h"

#include <immintrin.h>

#include <type_traits>

#include "common/kernels/avx2_util.h"
#include "common/kernels/avx512_util.h"
// Under this file's target ISA, so that its template inlines the AVX-512 steps below.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#include "common/kernels/gemv_chains.h"
#pragma GCC pop_options
#include "common/kernels/gemv_kernels.h"
#include "common/util/cpu_features.h"

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// 16 weights as fp32; bf16 widened (zero-extend, shift into the upper half).
inline __m512 LoadW(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 LoadW(const uint16_t* p) { return avx512::Load16(p); }
// 8 weights into lanes 0-7 (lanes 8-15 zero).
inline __m512 LoadW8(const float* p) { return _mm512_maskz_loadu_ps(0xFF, p); }
inline __m512 LoadW8(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline float ScalarW(float w) { return w; }
inline float ScalarW(uint16_t w) { return avx2::Load1(&w); }

// The AVX2 kernel's reduction: (lanes 0-7) + (lanes 8-15), then its tree.
inline float Reduce(__m512 acc) {
  const __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return avx2::HorizontalSum(_mm256_add_ps(lo, hi));
}

// acc[r][m] += 16 weights of row r at k0 times x row m at k0.
template <int R, int M, typename WT>
inline void Step(__m512 (&acc)[R][M], const float* x, int64_t K, const WT* w, int64_t k0, int64_t pf) {
  __m512 xv[M];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) xv[m] = _mm512_loadu_ps(x + m * K + k0);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    if (pf > 0) _mm_prefetch(reinterpret_cast<const char*>(w + r * K + k0) + pf, _MM_HINT_T0);
    const __m512 wv = LoadW(w + r * K + k0);
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
  }
}

// R consecutive weight rows (w, w + K, ...) against M rows of x; outputs
// y_col[m * ldy + r], in gemv_kernels.h's summation order (gemv_chains.h's
// schedule). Up to 16 accumulators the chains run interleaved: one chain of
// bf16 weights is bound by the FMA latency (~32 bytes per 4 cycles), below
// what a core reads from DRAM. Past that, one after the other; the compiler
// parks a few of chain 0's sums on the stack. The same bits either way, and
// the AVX2 Row's (a chain's lanes 0-7 / 8-15 are its lo / hi).
template <int R, int M, typename WT>
void Block(const float* x, int64_t K, const WT* w, float* y_col, int64_t ldy, int64_t pf) {
  __m512 acc0[R][M], acc1[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R * M; ++i) acc0[i / M][i % M] = acc1[i / M][i % M] = _mm512_setzero_ps();
  const int64_t nb = K / 16;
  gemv_chains::ForEachBlock<2 * R * M <= 16>(
      nb, pf, [&](int64_t k0, int64_t p) { Step<R, M>(acc0, x, K, w, k0, p); },
      [&](int64_t k0, int64_t p) { Step<R, M>(acc1, x, K, w, k0, p); });
  int64_t k = 16 * nb;
  if (k + 8 <= K) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 wv = LoadW8(w + r * K + k);
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
        acc1[r][m] = _mm512_mask3_fmadd_ps(wv, _mm512_maskz_loadu_ps(0xFF, x + m * K + k), acc1[r][m], 0xFF);
      }
    }
    k += 8;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      float s = Reduce(_mm512_add_ps(acc0[r][m], acc1[r][m]));
      for (int64_t kk = k; kk < K; ++kk) s += x[m * K + kk] * ScalarW(w[r * K + kk]);
      y_col[m * ldy + r] = s;
    }
  }
}

template <int M, typename WT>
void Rows(const float* x, int64_t K, const WT* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  // Weight rows per pass. bf16 weights against one row of x: one weight row
  // at a time, read whole and in order (as gemv_bf16dot.cc; four
  // interleaved rows streamed slower from DRAM, docs/benchmarks.md §3);
  // fp32 weights too where AVX-512 runs on 256-bit halves (Zen 4: twice
  // as fast there, ~10% slower on a Zen 5). Otherwise
  // four, which loads each x vector once per four FMAs. The same bits.
  static const bool f32_one_row = HostCpuFeatures().avx512_half_width;
  const bool one_row = M == 1 && (std::is_same_v<WT, uint16_t> || f32_one_row);
  const int64_t pf = GemvPrefetchBytes();
  int64_t n = n0;
  if (!one_row) {
    for (; n + 4 <= n1; n += 4) Block<4, M>(x, K, W + n * K, y + n, ldy, pf);
  }
  for (; n < n1; ++n) Block<1, M>(x, K, W + n * K, y + n, ldy, pf);
}

template <typename WT>
void Dispatch(const float* x, int64_t M, int64_t K, const WT* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (M) {
    case 1: return Rows<1>(x, K, W, n0, n1, y, ldy);
    case 2: return Rows<2>(x, K, W, n0, n1, y, ldy);
    case 3: return Rows<3>(x, K, W, n0, n1, y, ldy);
    case 4: return Rows<4>(x, K, W, n0, n1, y, ldy);
    default: return;
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

void GemvF32Avx512(const float* x, int64_t M, int64_t K, const float* W, int64_t n0, int64_t n1, float* y,
                   int64_t ldy) {
  Dispatch(x, M, K, W, n0, n1, y, ldy);
}

void GemvBf16Avx512(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
                    int64_t ldy) {
  Dispatch(x, M, K, W, n0, n1, y, ldy);
}

}  // namespace pdserve
