#include "common/model/gemv_kernels.h"

#include <immintrin.h>

#include "common/model/avx2_util.h"

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

using avx2::HorizontalSum;
inline __m256 LoadW(const float* p) { return avx2::Load8(p); }
inline __m256 LoadW(const uint16_t* p) { return avx2::Load8(p); }
inline float ScalarW(float w) { return w; }
inline float ScalarW(uint16_t w) { return avx2::Load1(&w); }

// One weight row against M rows of x. Rows are streamed one at a time:
// interleaving several row streams measured 1.6x slower on this machine
// (docs/benchmarks.md). One accumulator per x row for every M: the
// summation order of a row must not depend on how many rows share the pass,
// or a sequence's tokens would depend on its decode batch. (2 or 4
// accumulators for M = 1 measured no faster: the loop is bandwidth-bound.
// Two weight rows per pass against 4 x rows, which halves the x loads,
// measured 1.2-1.3x slower at batch 8-16: the same interleaving cost.)
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
