#include "common/model/gemv_q8_kmajor.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/model/gemv_kernels.h"
#include "common/model/gemv_kmajor.h"
#include "common/model/gemv_q8.h"

namespace pdserve {
namespace {

constexpr int64_t G = kKMajorGroup;          // outputs per group, as the bf16 packs
constexpr int64_t kScaleBytes = 2 * G;       // a block's 32 fp16 scales
constexpr int64_t kQuadBytes = 4 * G;        // two 64-byte lines: outputs 0-15, 16-31
constexpr int64_t kBlockBytes = kScaleBytes + 8 * kQuadBytes;  // 1088 = 32 × kQ8BlockBytes
constexpr int kBlockGroups = 4;  // groups per block of outputs: 128, ~104 KiB at K = 768 (stays in L2)
constexpr int kMaxRows = 6;      // rows of x per pass, at most
static_assert(kBlockBytes == G * kQ8BlockBytes, "a group's block holds its 32 rows' Q8_0 blocks");

// Where output j's 4 bytes of quad q sit in a group's block.
constexpr int64_t QuadOffset(int64_t q, int64_t j) { return kScaleBytes + q * kQuadBytes + j * 4; }

// One pass: rows [0, MR) of x against NH halves (16 outputs each; two per
// group) over every block, into out[i * ldo + 16 h].
struct PassArgs {
  const int8_t* xq;     // [MR, K], row stride K
  const float* xs;      // [MR, nb]
  const int32_t* bias;  // [MR, nb]: -128 * sum of each block of xq
  int64_t K, nb;
  const uint8_t* P;  // the first group
  int64_t gstride, pf;
  float* out;
  int64_t ldo;
};
using PassFn = void (*)(const PassArgs&);

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")  // GemvQ8VnniAvailable()
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// x's quad (4 int8) at p, in every int32 lane.
inline __m512i BroadcastQuad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <int MR, int NH>
void Pass(const PassArgs& a) {
  __m512 acc[MR][NH];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int h = 0; h < NH; ++h) acc[i][h] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < a.nb; ++b) {
    const uint8_t* blk[NH / 2];
#pragma GCC unroll 2
    for (int g = 0; g < NH / 2; ++g) blk[g] = a.P + g * a.gstride + b * kBlockBytes;
    __m512i dot[MR][NH];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i start = _mm512_set1_epi32(a.bias[i * a.nb + b]);
#pragma GCC unroll 4
      for (int h = 0; h < NH; ++h) dot[i][h] = start;
    }
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      __m512i w[NH];
#pragma GCC unroll 4
      for (int h = 0; h < NH; ++h) {
        const uint8_t* line = blk[h / 2] + QuadOffset(q, 16 * (h % 2));
        w[h] = _mm512_loadu_si512(line);
        if (a.pf > 0) _mm_prefetch(reinterpret_cast<const char*>(line) + a.pf, _MM_HINT_T0);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512i xb = BroadcastQuad(a.xq + i * a.K + b * kQ8Block + 4 * q);
#pragma GCC unroll 4
        for (int h = 0; h < NH; ++h) dot[i][h] = _mm512_dpbusd_epi32(dot[i][h], w[h], xb);
      }
    }
    __m512 dw[NH];
#pragma GCC unroll 4
    for (int h = 0; h < NH; ++h) {
      const uint8_t* scales = blk[h / 2] + 32 * (h % 2);
      dw[h] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
      if (a.pf > 0 && h % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(scales) + a.pf, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 dx = _mm512_set1_ps(a.xs[i * a.nb + b]);
#pragma GCC unroll 4
      for (int h = 0; h < NH; ++h) {
        acc[i][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i][h]), _mm512_mul_ps(dw[h], dx), acc[i][h]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int h = 0; h < NH; ++h) _mm512_storeu_ps(a.out + i * a.ldo + 16 * h, acc[i][h]);
  }
}

#pragma GCC diagnostic pop

inline float HalfToFloat(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

#pragma GCC pop_options

// By rows (1 .. kMaxRows) and groups (1, 2; nullptr where the registers do
// not hold the fp32 sums and the block's int32 sums of MR rows × 2 halves a
// group, beside a line per half). One row of x takes one group per pass:
// one DRAM stream, which a thread reads faster than two or four
// interleaved ones (docs/benchmarks.md section 44).
const PassFn kPasses[kMaxRows + 1][3] = {{},
                                         {nullptr, Pass<1, 2>},
                                         {nullptr, Pass<2, 2>, Pass<2, 4>},
                                         {nullptr, Pass<3, 2>, Pass<3, 4>},
                                         {nullptr, Pass<4, 2>},
                                         {nullptr, Pass<5, 2>},
                                         {nullptr, Pass<6, 2>}};

// Rows [0, mr) of x against `groups` (<= kBlockGroups) groups from a.P:
// the widest passes the registers hold, then narrower ones for the rest.
void Block(int mr, int groups, PassArgs a) {
  const uint8_t* P = a.P;
  float* out = a.out;
  for (int g = 0; g < groups;) {
    const int ng = kPasses[mr][2] != nullptr && groups - g >= 2 ? 2 : 1;
    a.P = P + g * a.gstride;
    a.out = out + g * G;
    kPasses[mr][ng](a);
    g += ng;
  }
}

}  // namespace

int64_t Q8KMajorBytes(int64_t N, int64_t K) { return KMajorGroups(N) * (K / kQ8Block) * kBlockBytes; }

void PackQ8KMajor(const uint8_t* W, int64_t N, int64_t K, int64_t g0, int64_t g1, uint8_t* out) {
  const int64_t nb = K / kQ8Block, gstride = nb * kBlockBytes;
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + g * gstride + b * kBlockBytes;
      for (int64_t j = 0; j < G; ++j) {
        const int64_t n = g * G + j;
        const uint8_t* src = n < N ? W + n * Q8RowBytes(K) + b * kQ8BlockBytes : nullptr;
        if (src != nullptr) {
          std::memcpy(o + 2 * j, src, 2);
        } else {
          std::memset(o + 2 * j, 0, 2);  // padding rows: scale 0, q 0
        }
        for (int64_t q = 0; q < 8; ++q) {
          for (int64_t i = 0; i < 4; ++i) {
            o[QuadOffset(q, j) + i] = static_cast<uint8_t>((src != nullptr ? src[2 + 4 * q + i] : 0) ^ 0x80);
          }
        }
      }
    }
  }
}

void GemvQ8KMajorDot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* P, int64_t N,
                     int64_t n0, int64_t n1, float* y, int64_t ldy) {
  n1 = std::min(n1, N);
  if (M <= 0 || n0 >= n1) return;
  const int64_t nb = K / kQ8Block;
  thread_local std::vector<int32_t> bias;  // reused: no allocation per call
  if (static_cast<int64_t>(bias.size()) < M * nb) bias.resize(M * nb);
  for (int64_t r = 0; r < M * nb; ++r) {
    int32_t s = 0;
    for (int64_t i = 0; i < kQ8Block; ++i) s += xq[r * kQ8Block + i];
    bias[r] = -128 * s;
  }
  alignas(64) float out[kMaxRows * kBlockGroups * G];
  const int64_t pf = GemvPrefetchBytes();
  PassArgs a{nullptr, nullptr, nullptr, K, nb, nullptr, nb * kBlockBytes, pf, out, 0};
  for (int64_t gb = n0 / G; gb * G < n1; gb += kBlockGroups) {
    const int groups = static_cast<int>(std::min<int64_t>(kBlockGroups, (n1 - gb * G + G - 1) / G));
    const int64_t c0 = std::max(n0, gb * G), c1 = std::min(n1, (gb + groups) * G);
    for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
      a.xq = xq + m0 * K;
      a.xs = xs + m0 * nb;
      a.bias = bias.data() + m0 * nb;
      a.P = P + gb * a.gstride;
      a.pf = m0 == 0 ? pf : 0;  // the first rows stream the block from DRAM; the others find it in L2
      a.ldo = groups * G;
      Block(mr, groups, a);
      for (int i = 0; i < mr; ++i) {
        std::copy(out + i * a.ldo + (c0 - gb * G), out + i * a.ldo + (c1 - gb * G), y + (m0 + i) * ldy + c0);
      }
    }
  }
}

void DequantizeQ8KMajorRow(const uint8_t* P, int64_t K, int64_t n, float* out) {
  const int64_t nb = K / kQ8Block, j = n % G;
  const uint8_t* group = P + (n / G) * nb * kBlockBytes;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * kBlockBytes;
    const float d = HalfToFloat(blk + 2 * j);
    for (int64_t q = 0; q < 8; ++q) {
      for (int64_t i = 0; i < 4; ++i) {
        out[b * kQ8Block + 4 * q + i] = d * static_cast<int8_t>(blk[QuadOffset(q, j) + i] ^ 0x80);
      }
    }
  }
}

}  // namespace pdserve
