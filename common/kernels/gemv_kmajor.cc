#include "common/kernels/gemv_kmajor.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "common/kernels/avx2_util.h"
#include "common/kernels/avx512_util.h"
#include "common/kernels/gemv_bf16dot.h"

namespace pdserve {
namespace {

constexpr int64_t G = kKMajorGroup;
constexpr int kBlockGroups = 4;  // groups per block: 128 outputs, ~192 KiB at K = 768 (stays in L2)
constexpr int kMaxRows = 8;      // rows of x per pass, at most

// One pass: rows [0, MR) of x (row stride ldx elements of X) against NG
// groups over k < K, group g at P + g * gstride, into out[i * ldo + 32 g +
// j]. pf > 0: prefetch each group's stream pf bytes ahead (the pass that
// reads it from DRAM). X is float for the exact passes, a pair of bf16
// (uint32) for the dot passes.
template <typename X>
using PassFn = void (*)(const X* x, int64_t ldx, int64_t K, const uint16_t* P, int64_t gstride, int64_t pf,
                        float* out, int64_t ldo);

// The passes of one build, by rows (1 .. rows) and NG (1, 2, 4; nullptr
// where the registers do not hold MR × NG groups).
template <typename X>
struct Passes {
  int rows;
  PassFn<X> pass[kMaxRows + 1][5];
};

// The AVX-512 builds' shapes (exact and dot keep two vectors per row of x
// and group; Fn<MR, NG>::value is the pass): up to 16 accumulators of 16
// outputs, 24 for 5-6 rows. Two groups (two DRAM streams) make 5-6 rows
// 1.2-1.3x faster than one group with fewer registers (docs/benchmarks.md
// §5); 7-8 rows × 2 groups would spill.
template <typename X, template <int, int> class Fn>
constexpr Passes<X> Avx512Shapes() {
  return {8,
          {{},
           {nullptr, Fn<1, 1>::value, Fn<1, 2>::value, nullptr, Fn<1, 4>::value},
           {nullptr, Fn<2, 1>::value, Fn<2, 2>::value, nullptr, Fn<2, 4>::value},
           {nullptr, Fn<3, 1>::value, Fn<3, 2>::value},
           {nullptr, Fn<4, 1>::value, Fn<4, 2>::value},
           {nullptr, Fn<5, 1>::value, Fn<5, 2>::value},
           {nullptr, Fn<6, 1>::value, Fn<6, 2>::value},
           {nullptr, Fn<7, 1>::value},
           {nullptr, Fn<8, 1>::value}}};
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")  // what GemvIsaAvailable(kAvx512) checks
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace avx512_passes {

template <int MR, int NG>
void Pass(const float* x, int64_t ldx, int64_t K, const uint16_t* P, int64_t gstride, int64_t pf, float* out,
          int64_t ldo) {
  __m512 acc[MR][2 * NG];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < 2 * NG; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k) {
    __m512 w[2 * NG];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) {
      const uint16_t* p = P + g * gstride + k * G;
      w[2 * g] = avx512::Load16(p);
      w[2 * g + 1] = avx512::Load16(p + 16);
      if (pf > 0) _mm_prefetch(reinterpret_cast<const char*>(p) + pf, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xb = _mm512_set1_ps(x[i * ldx + k]);
#pragma GCC unroll 8
      for (int j = 0; j < 2 * NG; ++j) acc[i][j] = _mm512_fmadd_ps(w[j], xb, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < 2 * NG; ++j) _mm512_storeu_ps(out + i * ldo + 16 * j, acc[i][j]);
  }
}

template <int MR, int NG>
struct Fn {
  static constexpr PassFn<float> value = Pass<MR, NG>;
};
const Passes<float> kPasses = Avx512Shapes<float, Fn>();

}  // namespace avx512_passes
#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2_passes {

template <int MR, int NG>
void Pass(const float* x, int64_t ldx, int64_t K, const uint16_t* P, int64_t gstride, int64_t pf, float* out,
          int64_t ldo) {
  __m256 acc[MR][4 * NG];
#pragma GCC unroll 2
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < 4 * NG; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k) {
    const float* xk = x + k;
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) {
      const uint16_t* p = P + g * gstride + k * G;
      if (pf > 0) _mm_prefetch(reinterpret_cast<const char*>(p) + pf, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m256 w = avx2::Load8(p + 8 * v);
#pragma GCC unroll 2
        for (int i = 0; i < MR; ++i) {
          acc[i][4 * g + v] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(xk + i * ldx), acc[i][4 * g + v]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < 4 * NG; ++j) _mm256_storeu_ps(out + i * ldo + 8 * j, acc[i][j]);
  }
}

// 8 accumulators of 8 outputs (16 ymm registers in all).
const Passes<float> kPasses = {2, {{}, {nullptr, Pass<1, 1>, Pass<1, 2>}, {nullptr, Pass<2, 1>}}};

}  // namespace avx2_passes
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")  // GemvBf16DotAvailable()
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace dot_passes {

// Output j of a group (0..31) in the lanes of the two vectors a pass keeps
// per group: vpunpck{l,h}wd of lines k and k+1 pair W[j][k], W[j][k+1] in
// one 32-bit lane, in-lane: lo = outputs {0-3, 8-11, 16-19, 24-27}, hi =
// {4-7, 12-15, 20-23, 28-31}. Lane(n): the lane of output n in (lo, hi) as
// _mm512_permutex2var_ps indexes them (16 + l: hi's lane l).
constexpr int Lane(int n) { return (n % 8 < 4 ? 0 : 16) + 4 * (n / 8) + n % 4; }

template <int MR, int NG>
void Pass(const uint32_t* x, int64_t ldx, int64_t K, const uint16_t* P, int64_t gstride, int64_t pf, float* out,
          int64_t ldo) {
  __m512 acc[MR][2 * NG];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < 2 * NG; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  // k = 2p, 2p + 1: lines 2p and 2p + 1 of each group, x's pair p. An odd
  // K's last k pairs with a zero line (x's pad is zero; the next line is
  // not ours to read).
  const auto step = [&](int64_t p, bool last_odd) {
    __m512i w[2 * NG];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) {
      const uint16_t* line = P + g * gstride + 2 * p * G;
      const __m512i a = _mm512_loadu_si512(line);
      const __m512i b = last_odd ? _mm512_setzero_si512() : _mm512_loadu_si512(line + G);
      w[2 * g] = _mm512_unpacklo_epi16(a, b);
      w[2 * g + 1] = _mm512_unpackhi_epi16(a, b);
      if (pf > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(line) + pf, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(line + G) + pf, _MM_HINT_T0);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[i * ldx + p]));
#pragma GCC unroll 8
      for (int j = 0; j < 2 * NG; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)w[j], xb);
    }
  };
  for (int64_t p = 0; p < K / 2; ++p) step(p, false);
  if (K % 2 != 0) step(K / 2, true);
  const __m512i first = _mm512_setr_epi32(Lane(0), Lane(1), Lane(2), Lane(3), Lane(4), Lane(5), Lane(6), Lane(7),
                                          Lane(8), Lane(9), Lane(10), Lane(11), Lane(12), Lane(13), Lane(14),
                                          Lane(15));
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));  // Lane(n + 16) = Lane(n) + 8
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) {
      _mm512_storeu_ps(out + i * ldo + G * g, _mm512_permutex2var_ps(acc[i][2 * g], first, acc[i][2 * g + 1]));
      _mm512_storeu_ps(out + i * ldo + G * g + 16,
                       _mm512_permutex2var_ps(acc[i][2 * g], second, acc[i][2 * g + 1]));
    }
  }
}

template <int MR, int NG>
struct Fn {
  static constexpr PassFn<uint32_t> value = Pass<MR, NG>;
};
const Passes<uint32_t> kPasses = Avx512Shapes<uint32_t, Fn>();

}  // namespace dot_passes
#pragma GCC diagnostic pop
#pragma GCC pop_options

// Rows [0, mr) of x against `groups` (<= kBlockGroups) groups at P, into
// out[i * ldo + ...]: the widest passes the registers hold, then narrower
// ones for the groups left.
template <typename X>
void Block(const Passes<X>& passes, int mr, int groups, const X* x, int64_t ldx, int64_t K, const uint16_t* P,
           int64_t gstride, int64_t pf, float* out, int64_t ldo) {
  for (int g = 0; g < groups;) {
    int ng = 4;
    while (ng > 1 && (passes.pass[mr][ng] == nullptr || ng > groups - g)) ng /= 2;
    passes.pass[mr][ng](x, ldx, K, P + g * gstride, gstride, pf, out + g * G, ldo);
    g += ng;
  }
}

// x: M rows of ldx elements of X; K: W's columns (the passes' k range).
template <typename X>
void Drive(const Passes<X>& passes, const X* x, int64_t ldx, int64_t M, int64_t K, const uint16_t* P, int64_t n0,
           int64_t n1, float* y, int64_t ldy) {
  if (M <= 0 || n0 >= n1) return;
  const int64_t gstride = K * G, pf = GemvPrefetchBytes();
  alignas(64) float out[kMaxRows * kBlockGroups * G];
  for (int64_t gb = n0 / G; gb * G < n1; gb += kBlockGroups) {
    const int groups = static_cast<int>(std::min<int64_t>(kBlockGroups, (n1 - gb * G + G - 1) / G));
    const int64_t c0 = std::max(n0, gb * G), c1 = std::min(n1, (gb + groups) * G);
    for (int64_t m0 = 0; m0 < M; m0 += passes.rows) {
      const int mr = static_cast<int>(std::min<int64_t>(passes.rows, M - m0));
      // The first rows' passes stream the block from DRAM; the others find it in L2.
      Block(passes, mr, groups, x + m0 * ldx, ldx, K, P + gb * gstride, gstride, m0 == 0 ? pf : 0, out,
            groups * G);
      for (int i = 0; i < mr; ++i) {
        std::copy(out + i * groups * G + (c0 - gb * G), out + i * groups * G + (c1 - gb * G),
                  y + (m0 + i) * ldy + c0);
      }
    }
  }
}

}  // namespace

void PackBf16KMajor(const uint16_t* W, int64_t N, int64_t K, int64_t g0, int64_t g1, uint16_t* out) {
  for (int64_t g = g0; g < g1; ++g) {
    uint16_t* o = out + g * K * G;
    for (int64_t j = 0; j < G; ++j) {
      const int64_t n = g * G + j;
      if (n >= N) {
        for (int64_t k = 0; k < K; ++k) o[k * G + j] = 0;  // padding rows
        continue;
      }
      const uint16_t* row = W + n * K;
      for (int64_t k = 0; k < K; ++k) o[k * G + j] = row[k];
    }
  }
}

// Only where packs exist, which needs AVX2 + FMA (GemvAvailable()).
#pragma GCC push_options
#pragma GCC target("avx2,fma")
void WidenKMajorT(const uint16_t* P, int64_t K, int64_t g0, int64_t g1, float* wt, int64_t ldw) {
  static_assert(G % 8 == 0, "a group is whole AVX2 vectors");
  for (int64_t g = g0; g < g1; ++g) {
    const uint16_t* src = P + g * K * G;
    for (int64_t k = 0; k < K; ++k) {
      float* dst = wt + k * ldw + g * G;
#pragma GCC unroll 4
      for (int64_t j = 0; j < G; j += 8) _mm256_storeu_ps(dst + j, avx2::Load8(src + k * G + j));
    }
  }
}

void WidenKMajorRow(const uint16_t* P, int64_t K, int64_t n, float* out) {
  const uint16_t* src = P + (n / G) * K * G + n % G;
  for (int64_t k = 0; k < K; ++k) out[k] = avx2::Load1(src + k * G);
}
#pragma GCC pop_options

void GemvBf16KMajor(const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0, int64_t n1,
                    float* y, int64_t ldy, GemvIsa isa) {
  n1 = std::min(n1, N);
  Drive(isa == GemvIsa::kAvx512 ? avx512_passes::kPasses : avx2_passes::kPasses, x, K, M, K, P, n0, n1, y, ldy);
}

void GemvBf16KMajor(const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0, int64_t n1,
                    float* y, int64_t ldy) {
  GemvBf16KMajor(x, M, K, P, N, n0, n1, y, ldy, GemvDefaultIsa());
}

void GemvBf16KMajorDotRounded(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0,
                              int64_t n1, float* y, int64_t ldy) {
  // Bf16DotStride(K) is even: each row is whole pairs, zeros past K.
  Drive(dot_passes::kPasses, reinterpret_cast<const uint32_t*>(xb), Bf16DotStride(K) / 2, M, K, P, n0,
        std::min(n1, N), y, ldy);
}

void GemvBf16KMajorDot(const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0, int64_t n1,
                       float* y, int64_t ldy) {
  if (M <= 0 || n0 >= std::min(n1, N)) return;
  thread_local std::vector<uint16_t> xb;  // reused: no allocation per call
  if (static_cast<int64_t>(xb.size()) < M * Bf16DotStride(K)) xb.resize(M * Bf16DotStride(K));
  RoundRowsToBf16(x, M, K, xb.data());
  GemvBf16KMajorDotRounded(xb.data(), M, K, P, N, n0, n1, y, ldy);
}

}  // namespace pdserve
