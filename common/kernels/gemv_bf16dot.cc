#include "common/kernels/gemv_bf16dot.h"

#include <immintrin.h>

#include <vector>

#include "common/kernels/avx512_util.h"
#include "common/kernels/gemv_kernels.h"
#include "common/util/cpu_features.h"

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

void RoundRows(const float* x, int64_t M, int64_t K, int64_t ld, uint16_t* out) {
  for (int64_t m = 0; m < M; ++m) {
    uint16_t* o = out + m * ld;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + m * K + k + 16), _mm512_loadu_ps(x + m * K + k));
      _mm512_storeu_si512(o + k, reinterpret_cast<__m512i>(b));
    }
    for (; k < ld; k += 16) {
      const int64_t left = K - k;
      const __mmask16 mask = left >= 16 ? 0xFFFF : left > 0 ? static_cast<__mmask16>((1u << left) - 1) : 0;
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + m * K + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + k), reinterpret_cast<__m256i>(b));
    }
  }
}

// Sum of the 16 lanes in a fixed tree: 8 + 8, 4 + 4, 2 + 2, 1 + 1.
inline float Reduce(__m512 acc) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

// R consecutive weight rows (w, w + K, ...) against M rows of xb (stride
// ldx, zero-padded); outputs y_col[m * ldy + r].
template <int R, int M>
void Block(const uint16_t* xb, int64_t ldx, int64_t K, const uint16_t* w, float* y_col, int64_t ldy, int64_t pf) {
  __m512 acc[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R * M; ++i) acc[i / M][i % M] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh xv[M];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) xv[m] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + m * ldx + k));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (pf > 0) _mm_prefetch(reinterpret_cast<const char*>(w + r * K + k) + pf, _MM_HINT_T0);
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + r * K + k));
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], wv, xv[m]);
    }
  }
  if (k < K) {  // the tail: weights past K masked to zero (x is zero-padded)
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w + r * K + k));
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
        const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + m * ldx + k));
        acc[r][m] = _mm512_dpbf16_ps(acc[r][m], wv, xv);
      }
    }
  }
  if constexpr (R == 4) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      _mm_storeu_ps(y_col + m * ldy, avx512::Sum4(acc[0][m], acc[1][m], acc[2][m], acc[3][m]));
    }
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) y_col[m * ldy + r] = Reduce(acc[r][m]);
  }
}

template <int M>
void Rows(const uint16_t* xb, int64_t ldx, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
          int64_t ldy) {
  // Weight rows per pass. One row of x (batch-1 decode) reads weight rows
  // one at a time, each whole and in order: four interleaved rows streamed
  // 10-25% slower from DRAM on the Zen 5 EPYC (docs/benchmarks.md §3).
  // Same bits: Reduce is Sum4's tree. From two rows of x up, four
  // weight rows share each x load; without that the kernel is bound by its
  // arithmetic.
  constexpr int R = M == 1 ? 1 : 4;
  const int64_t pf = GemvPrefetchBytes();
  int64_t n = n0;
  for (; n + R <= n1; n += R) Block<R, M>(xb, ldx, K, W + n * K, y + n, ldy, pf);
  for (; n < n1; ++n) Block<1, M>(xb, ldx, K, W + n * K, y + n, ldy, pf);
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

bool GemvBf16DotAvailable() {
  static const bool ok = [] {
    const CpuFeatures& f = HostCpuFeatures();
    const absl::StatusOr<Isa> isa = HostIsa();
    return IsaSupported(f, Isa::kAvx512) && f.avx512_bf16 && isa.ok() && *isa != Isa::kAvx2;
  }();
  return ok;
}

void RoundRowsToBf16(const float* x, int64_t M, int64_t K, uint16_t* out) {
  RoundRows(x, M, K, Bf16DotStride(K), out);
}

void GemvBf16DotRounded(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1,
                        float* y, int64_t ldy) {
  const int64_t ldx = Bf16DotStride(K);
  switch (M) {
    case 1: return Rows<1>(xb, ldx, K, W, n0, n1, y, ldy);
    case 2: return Rows<2>(xb, ldx, K, W, n0, n1, y, ldy);
    case 3: return Rows<3>(xb, ldx, K, W, n0, n1, y, ldy);
    case 4: return Rows<4>(xb, ldx, K, W, n0, n1, y, ldy);
    default: return;
  }
}

void GemvBf16Dot(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
                 int64_t ldy) {
  if (M <= 0 || M > kGemvMaxRows || n0 >= n1) return;
  thread_local std::vector<uint16_t> xb;  // reused: no allocation per call
  if (static_cast<int64_t>(xb.size()) < M * Bf16DotStride(K)) xb.resize(M * Bf16DotStride(K));
  RoundRowsToBf16(x, M, K, xb.data());
  GemvBf16DotRounded(xb.data(), M, K, W, n0, n1, y, ldy);
}

}  // namespace pdserve
