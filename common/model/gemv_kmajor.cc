#include "common/model/gemv_kmajor.h"

#include <immintrin.h>

#include <algorithm>

#include "common/model/avx2_util.h"
#include "common/model/avx512_util.h"

namespace pdserve {
namespace {

constexpr int64_t G = kKMajorGroup;
constexpr int kBlockGroups = 4;  // groups per block: 128 outputs, ~192 KiB at K = 768 (stays in L2)
constexpr int kMaxRows = 8;      // rows of x per pass, at most

// One pass: rows [0, MR) of x (row stride K) against NG groups, group g at
// P + g * gstride, into out[i * ldo + 32 g + j]. pf > 0: prefetch each
// group's stream pf bytes ahead (the pass that reads it from DRAM).
using PassFn = void (*)(const float* x, int64_t K, const uint16_t* P, int64_t gstride, int64_t pf, float* out,
                        int64_t ldo);

// The passes of one build, by rows (1 .. rows) and NG (1, 2, 4; nullptr
// where the registers do not hold MR × NG groups).
struct Passes {
  int rows;
  PassFn pass[kMaxRows + 1][5];
};

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")  // what GemvIsaAvailable(kAvx512) checks
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace avx512_passes {

template <int MR, int NG>
void Pass(const float* x, int64_t K, const uint16_t* P, int64_t gstride, int64_t pf, float* out, int64_t ldo) {
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
      const __m512 xb = _mm512_set1_ps(x[i * K + k]);
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

// Up to 16 accumulators of 16 outputs, 24 for 5-6 rows: two groups (two
// DRAM streams) make 5-6 rows 1.2-1.3x faster than one group with fewer
// registers (docs/benchmarks.md section 40); 7-8 rows × 2 groups would
// spill.
const Passes kPasses = {8,
                        {{},
                         {nullptr, Pass<1, 1>, Pass<1, 2>, nullptr, Pass<1, 4>},
                         {nullptr, Pass<2, 1>, Pass<2, 2>, nullptr, Pass<2, 4>},
                         {nullptr, Pass<3, 1>, Pass<3, 2>},
                         {nullptr, Pass<4, 1>, Pass<4, 2>},
                         {nullptr, Pass<5, 1>, Pass<5, 2>},
                         {nullptr, Pass<6, 1>, Pass<6, 2>},
                         {nullptr, Pass<7, 1>},
                         {nullptr, Pass<8, 1>}}};

}  // namespace avx512_passes
#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2_passes {

template <int MR, int NG>
void Pass(const float* x, int64_t K, const uint16_t* P, int64_t gstride, int64_t pf, float* out, int64_t ldo) {
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
          acc[i][4 * g + v] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(xk + i * K), acc[i][4 * g + v]);
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
const Passes kPasses = {2, {{}, {nullptr, Pass<1, 1>, Pass<1, 2>}, {nullptr, Pass<2, 1>}}};

}  // namespace avx2_passes
#pragma GCC pop_options

// Rows [0, mr) of x against `groups` (<= kBlockGroups) groups at P, into
// out[i * ldo + ...]: the widest passes the registers hold, then narrower
// ones for the groups left.
void Block(const Passes& passes, int mr, int groups, const float* x, int64_t K, const uint16_t* P, int64_t gstride,
           int64_t pf, float* out, int64_t ldo) {
  for (int g = 0; g < groups;) {
    int ng = 4;
    while (ng > 1 && (passes.pass[mr][ng] == nullptr || ng > groups - g)) ng /= 2;
    passes.pass[mr][ng](x, K, P + g * gstride, gstride, pf, out + g * G, ldo);
    g += ng;
  }
}

void Drive(const Passes& passes, const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t n0, int64_t n1,
           float* y, int64_t ldy) {
  if (M <= 0 || n0 >= n1) return;
  const int64_t gstride = K * G, pf = GemvPrefetchBytes();
  alignas(64) float out[kMaxRows * kBlockGroups * G];
  for (int64_t gb = n0 / G; gb * G < n1; gb += kBlockGroups) {
    const int groups = static_cast<int>(std::min<int64_t>(kBlockGroups, (n1 - gb * G + G - 1) / G));
    const int64_t c0 = std::max(n0, gb * G), c1 = std::min(n1, (gb + groups) * G);
    for (int64_t m0 = 0; m0 < M; m0 += passes.rows) {
      const int mr = static_cast<int>(std::min<int64_t>(passes.rows, M - m0));
      // The first rows' passes stream the block from DRAM; the others find it in L2.
      Block(passes, mr, groups, x + m0 * K, K, P + gb * gstride, gstride, m0 == 0 ? pf : 0, out, groups * G);
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
  Drive(isa == GemvIsa::kAvx512 ? avx512_passes::kPasses : avx2_passes::kPasses, x, M, K, P, n0, n1, y, ldy);
}

void GemvBf16KMajor(const float* x, int64_t M, int64_t K, const uint16_t* P, int64_t N, int64_t n0, int64_t n1,
                    float* y, int64_t ldy) {
  GemvBf16KMajor(x, M, K, P, N, n0, n1, y, ldy, GemvDefaultIsa());
}

}  // namespace pdserve
