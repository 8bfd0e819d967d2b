#include "common/kernels/gemv_q8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/kernels/avx2_util.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8_avx512.h"
#include "common/util/cpu_features.h"

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

inline float HalfToFloat(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i Load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }


// One weight row against M quantized rows of x. Two accumulators per row
// (even and odd blocks) break the FMA latency chain.
template <int M>
void DotRow(const int8_t* xq, const float* xs, int64_t K, const uint8_t* w, float* y_col, int64_t ldy, int64_t pf) {
  const int64_t nb = K / kQ8Block;
  __m256 acc[2][M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[0][m] = acc[1][m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kQ8BlockBytes;
    if (pf > 0) _mm_prefetch(reinterpret_cast<const char*>(blk) + pf, _MM_HINT_T0);
    const __m256i qw = Load32(blk + 2);
    const __m256 dw = _mm256_set1_ps(HalfToFloat(blk));
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(xs + m * nb + b));
      acc[b & 1][m] = _mm256_fmadd_ps(avx2::Int8BlockDot(qw, Load32(xq + m * K + b * kQ8Block)), d, acc[b & 1][m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) y_col[m * ldy] = avx2::HorizontalSum(_mm256_add_ps(acc[0][m], acc[1][m]));
}

// 8 int8 weights widened to fp32.
inline __m256 Widen8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// One weight row against M fp32 rows of x: each block widened, FMA'd with
// x into a block sum, which is then scaled into the row's accumulator.
template <int M>
void FmaRow(const float* x, int64_t K, const uint8_t* w, float* y_col, int64_t ldy, int64_t pf) {
  const int64_t nb = K / kQ8Block;
  __m256 acc[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kQ8BlockBytes;
    if (pf > 0) _mm_prefetch(reinterpret_cast<const char*>(blk) + pf, _MM_HINT_T0);
    const __m256 dw = _mm256_set1_ps(HalfToFloat(blk));
    const __m256 w0 = Widen8(blk + 2), w1 = Widen8(blk + 10), w2 = Widen8(blk + 18), w3 = Widen8(blk + 26);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const float* xb = x + m * K + b * kQ8Block;
      __m256 s = _mm256_mul_ps(w0, _mm256_loadu_ps(xb));
      s = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + 8), s);
      s = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + 16), s);
      s = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + 24), s);
      acc[m] = _mm256_fmadd_ps(s, dw, acc[m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) y_col[m * ldy] = avx2::HorizontalSum(acc[m]);
}

template <int M>
void DotRows(const int8_t* xq, const float* xs, int64_t K, const uint8_t* W, int64_t n0, int64_t n1, float* y,
             int64_t ldy) {
  const int64_t rb = Q8RowBytes(K);
  const int64_t pf = GemvPrefetchBytes();
  for (int64_t n = n0; n < n1; ++n) DotRow<M>(xq, xs, K, W + n * rb, y + n, ldy, pf);
}

template <int M>
void FmaRows(const float* x, int64_t K, const uint8_t* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t rb = Q8RowBytes(K);
  const int64_t pf = GemvPrefetchBytes();
  for (int64_t n = n0; n < n1; ++n) FmaRow<M>(x, K, W + n * rb, y + n, ldy, pf);
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Per block: d = max|x| / 127, q = x * (1 / d) rounded to nearest even (the
// default MXCSR mode, as std::nearbyint), packed to int8 in order.
void QuantizeRowsImpl(const float* x, int64_t M, int64_t K, int8_t* xq, float* xs) {
  const int64_t nb = K / kQ8Block;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + m * K + b * kQ8Block;
      __m256 f[4];
      for (int i = 0; i < 4; ++i) f[i] = _mm256_loadu_ps(v + 8 * i);
      const __m256 amax8 = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, f[0]), _mm256_andnot_ps(sign, f[1])),
                                         _mm256_max_ps(_mm256_andnot_ps(sign, f[2]), _mm256_andnot_ps(sign, f[3])));
      const float d = HorizontalMax(amax8) / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
      xs[m * nb + b] = d;
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(f[i], _mm256_set1_ps(id)));
      // packs interleave the 128-bit lanes; the permute restores the order.
      const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + m * K + b * kQ8Block),
                          _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
  }
}

#pragma GCC pop_options

// QuantizeRowsImpl's math for CPUs without AVX2 (prefill's round trip of x
// in linear_int8.cc runs there too).
void QuantizeRowsPortable(const float* x, int64_t M, int64_t K, int8_t* xq, float* xs) {
  const int64_t nb = K / kQ8Block;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + m * K + b * kQ8Block;
      float amax = 0;
      for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
      xs[m * nb + b] = d;
      for (int i = 0; i < kQ8Block; ++i) xq[m * K + b * kQ8Block + i] = static_cast<int8_t>(std::nearbyint(v[i] * id));
    }
  }
}

}  // namespace

bool GemvQ8Available() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

bool GemvQ8VnniAvailable() {
  const CpuFeatures& f = HostCpuFeatures();
  return GemvQ8Available() && f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni;
}

GemvIsa GemvQ8DotIsa() {
  static const GemvIsa isa =
      GemvDefaultIsa() == GemvIsa::kAvx512 && GemvQ8VnniAvailable() ? GemvIsa::kAvx512 : GemvIsa::kAvx2;
  return isa;
}

void QuantizeRowsQ8(const float* x, int64_t M, int64_t K, int8_t* xq, float* xs) {
  if (!GemvQ8Available()) return QuantizeRowsPortable(x, M, K, xq, xs);
  QuantizeRowsImpl(x, M, K, xq, xs);
}

void GemvQ8Dot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* W, int64_t n0,
               int64_t n1, float* y, int64_t ldy, GemvIsa isa) {
  if (isa == GemvIsa::kAvx512) return GemvQ8DotAvx512(xq, xs, M, K, W, n0, n1, y, ldy);
  switch (M) {
    case 1: return DotRows<1>(xq, xs, K, W, n0, n1, y, ldy);
    case 2: return DotRows<2>(xq, xs, K, W, n0, n1, y, ldy);
    case 3: return DotRows<3>(xq, xs, K, W, n0, n1, y, ldy);
    case 4: return DotRows<4>(xq, xs, K, W, n0, n1, y, ldy);
    default: return;
  }
}

void GemvQ8Dot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* W, int64_t n0,
               int64_t n1, float* y, int64_t ldy) {
  GemvQ8Dot(xq, xs, M, K, W, n0, n1, y, ldy, GemvQ8DotIsa());
}

void GemvQ8Fma(const float* x, int64_t M, int64_t K, const uint8_t* W, int64_t n0, int64_t n1, float* y,
               int64_t ldy) {
  switch (M) {
    case 1: return FmaRows<1>(x, K, W, n0, n1, y, ldy);
    case 2: return FmaRows<2>(x, K, W, n0, n1, y, ldy);
    case 3: return FmaRows<3>(x, K, W, n0, n1, y, ldy);
    case 4: return FmaRows<4>(x, K, W, n0, n1, y, ldy);
    default: return;
  }
}

}  // namespace pdserve
