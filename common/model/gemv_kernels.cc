#include "common/model/gemv_kernels.h"

#include <immintrin.h>

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

inline __m256 LoadW(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 LoadW(const uint16_t* p) {
  __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline float ScalarW(float w) { return w; }
inline float ScalarW(uint16_t w) {
  uint32_t bits = static_cast<uint32_t>(w) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One weight row against M rows of x. Rows are streamed one at a time:
// interleaving several row streams measured 1.6x slower on this machine
// (docs/benchmarks.md). One accumulator per x row for every M: the
// summation order of a row must not depend on how many rows share the pass,
// or a sequence's tokens would depend on its decode batch. (2 or 4
// accumulators for M = 1 measured no faster: the loop is bandwidth-bound.)
template <int M, typename WT>
void Row(const float* x, int64_t K, const WT* w, float* y_col, int64_t ldy) {
  __m256 acc[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 wv = LoadW(w + k);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + m * K + k), acc[m]);
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    float s = HorizontalSum(acc[m]);
    for (int64_t kk = k; kk < K; ++kk) s += x[m * K + kk] * ScalarW(w[kk]);
    y_col[m * ldy] = s;
  }
}

template <int M, typename WT>
void Rows(const float* x, int64_t K, const WT* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  for (int64_t n = n0; n < n1; ++n) Row<M>(x, K, W + n * K, y + n, ldy);
}

template <typename WT>
void Dispatch(const float* x, int64_t M, int64_t K, const WT* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (M) {
    case 1: return Rows<1>(x, K, W, n0, n1, y, ldy);
    case 2: return Rows<2>(x, K, W, n0, n1, y, ldy);
    case 3: return Rows<3>(x, K, W, n0, n1, y, ldy);
    case 4: return Rows<4>(x, K, W, n0, n1, y, ldy);
    case 5: return Rows<5>(x, K, W, n0, n1, y, ldy);
    case 6: return Rows<6>(x, K, W, n0, n1, y, ldy);
    case 7: return Rows<7>(x, K, W, n0, n1, y, ldy);
    case 8: return Rows<8>(x, K, W, n0, n1, y, ldy);
    default: return;
  }
}

#pragma GCC pop_options

}  // namespace

bool GemvAvailable() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

void GemvF32(const float* x, int64_t M, int64_t K, const float* W, int64_t n0, int64_t n1, float* y,
             int64_t ldy) {
  Dispatch(x, M, K, W, n0, n1, y, ldy);
}

void GemvBf16(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  Dispatch(x, M, K, W, n0, n1, y, ldy);
}

}  // namespace pdserve
