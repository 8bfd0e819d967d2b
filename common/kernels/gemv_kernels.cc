#include "common/kernels/gemv_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>

#include "common/kernels/avx2_util.h"
// Under this file's target ISA, so that its template inlines the AVX2 steps below.
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "common/kernels/gemv_chains.h"
#pragma GCC pop_options
#include "common/kernels/gemv_avx512.h"
#include "common/util/cpu_features.h"

namespace pdserve {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

using avx2::HorizontalSum;
inline __m256 LoadW(const float* p) { return avx2::Load8(p); }
inline __m256 LoadW(const uint16_t* p) { return avx2::Load8(p); }
inline float ScalarW(float w) { return w; }
inline float ScalarW(uint16_t w) { return avx2::Load1(&w); }

// lo[m] / hi[m] += 8 + 8 weights at k0 times x row m at k0.
template <int M, typename WT>
inline void Step(__m256 (&lo)[M], __m256 (&hi)[M], const float* x, int64_t K, const WT* w, int64_t k0,
                 int64_t pf) {
  if (pf > 0) _mm_prefetch(reinterpret_cast<const char*>(w + k0) + pf, _MM_HINT_T0);
  const __m256 w0 = LoadW(w + k0), w1 = LoadW(w + k0 + 8);
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
    lo[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + m * K + k0), lo[m]);
    hi[m] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + m * K + k0 + 8), hi[m]);
  }
}

// One weight row against M rows of x, in gemv_kernels.h's summation order
// (gemv_chains.h's schedule; each chain two accumulators: lo and hi, the
// 8-wide halves of a block). Rows are streamed one at a time: interleaving
// several weight rows measured 1.2-1.6x slower on this machine
// (docs/benchmarks.md). For M <= 2 the chains run interleaved (with one, a
// bf16 row is bound by the FMA latency, ~16 bytes per 4-5 cycles, rather
// than by memory); past that, one after the other, as 16 ymm registers
// cannot hold them all.
template <int M, typename WT>
void Row(const float* x, int64_t K, const WT* w, float* y_col, int64_t ldy, int64_t pf) {
  __m256 lo0[M], hi0[M], lo1[M], hi1[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) lo0[m] = hi0[m] = lo1[m] = hi1[m] = _mm256_setzero_ps();
  const int64_t nb = K / 16;
  gemv_chains::ForEachBlock<M <= 2>(
      nb, pf, [&](int64_t k0, int64_t p) { Step<M>(lo0, hi0, x, K, w, k0, p); },
      [&](int64_t k0, int64_t p) { Step<M>(lo1, hi1, x, K, w, k0, p); });
  int64_t k = 16 * nb;
  if (k + 8 <= K) {
    const __m256 w0 = LoadW(w + k);
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) lo1[m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + m * K + k), lo1[m]);
    k += 8;
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
    const __m256 lo = _mm256_add_ps(lo0[m], lo1[m]), hi = _mm256_add_ps(hi0[m], hi1[m]);
    float s = HorizontalSum(_mm256_add_ps(lo, hi));
    for (int64_t kk = k; kk < K; ++kk) s += x[m * K + kk] * ScalarW(w[kk]);
    y_col[m * ldy] = s;
  }
}

template <int M, typename WT>
void Rows(const float* x, int64_t K, const WT* W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t pf = GemvPrefetchBytes();
  for (int64_t n = n0; n < n1; ++n) Row<M>(x, K, W + n * K, y + n, ldy, pf);
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

#pragma GCC pop_options

}  // namespace

bool GemvAvailable() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool GemvIsaAvailable(GemvIsa isa) {
  const CpuFeatures& f = HostCpuFeatures();
  const bool avx2 = f.avx2 && f.fma;
  return isa == GemvIsa::kAvx512 ? avx2 && f.avx512f : avx2;
}

GemvIsa GemvDefaultIsa() {
  static const GemvIsa isa = [] {
    const absl::StatusOr<Isa> host = HostIsa();
    const bool forced_avx2 = host.ok() && *host == Isa::kAvx2;
    return !forced_avx2 && GemvIsaAvailable(GemvIsa::kAvx512) ? GemvIsa::kAvx512 : GemvIsa::kAvx2;
  }();
  return isa;
}

int64_t GemvPrefetchBytes() {
  static const int64_t bytes = [] {
    const char* env = std::getenv("PDSERVE_GEMV_PREFETCH");
    return env != nullptr && *env != '\0' ? std::max<int64_t>(0, std::atoll(env)) : int64_t{4096};
  }();
  return bytes;
}

int64_t GemvTileRows(int64_t row_bytes) {
  return std::max<int64_t>(8, (int64_t{64} << 10) / std::max<int64_t>(1, row_bytes) / 4 * 4);
}

const char* GemvIsaName(GemvIsa isa) { return isa == GemvIsa::kAvx512 ? "avx512" : "avx2"; }

void GemvF32(const float* x, int64_t M, int64_t K, const float* W, int64_t n0, int64_t n1, float* y, int64_t ldy,
             GemvIsa isa) {
  if (isa == GemvIsa::kAvx512) return GemvF32Avx512(x, M, K, W, n0, n1, y, ldy);
  Dispatch(x, M, K, W, n0, n1, y, ldy);
}

void GemvBf16(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
              int64_t ldy, GemvIsa isa) {
  if (isa == GemvIsa::kAvx512) return GemvBf16Avx512(x, M, K, W, n0, n1, y, ldy);
  Dispatch(x, M, K, W, n0, n1, y, ldy);
}

void GemvF32(const float* x, int64_t M, int64_t K, const float* W, int64_t n0, int64_t n1, float* y,
             int64_t ldy) {
  GemvF32(x, M, K, W, n0, n1, y, ldy, GemvDefaultIsa());
}

void GemvBf16(const float* x, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  GemvBf16(x, M, K, W, n0, n1, y, ldy, GemvDefaultIsa());
}

}  // namespace pdserve
