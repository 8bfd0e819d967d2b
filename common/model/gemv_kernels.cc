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

// R weight rows x M input rows per iteration: R*M independent accumulators
// hide the FMA latency while each weight byte is loaded exactly once.
template <int M, int R, typename WT>
void Block(const float* x, int64_t K, const WT* W, int64_t n, float* y, int64_t ldy) {
  // Fully unrolled so that acc and xv live in registers.
  __m256 acc[R][M];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_ps();
  const int64_t K8 = K & ~int64_t{7};
  for (int64_t k = 0; k < K8; k += 8) {
    __m256 xv[M];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) xv[m] = _mm256_loadu_ps(x + m * K + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 w = LoadW(W + (n + r) * K + k);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) acc[r][m] = _mm256_fmadd_ps(w, xv[m], acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < M; ++m) {
      float s = HorizontalSum(acc[r][m]);
      for (int64_t k = K8; k < K; ++k) s += x[m * K + k] * ScalarW(W[(n + r) * K + k]);
      y[m * ldy + n + r] = s;
    }
  }
}

template <int M, typename WT>
void Rows(const float* x, int64_t K, const WT* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int R = M == 1 ? 4 : (M == 2 ? 2 : 1);
  int64_t n = n0;
  for (; n + R <= n1; n += R) Block<M, R>(x, K, W, n, y, ldy);
  for (; n < n1; ++n) Block<M, 1>(x, K, W, n, y, ldy);
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
