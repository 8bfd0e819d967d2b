#include "common/kernels/gemv_q8_kmajor.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_q8.h"

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
  const int32_t* bias;  // [MR, nb]: -128 * sum of each block of xq (AVX-512 only)
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
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")  // GemvQ8Available()

// The AVX2 build, without vpdpbusd: a ymm line holds 8 outputs' quads, and
// vpmaddubsw (u8 x s8, pairs summed to int16 with saturation) takes |q| by
// x with q's sign (vpsignb): |q| * |x| <= 127 * 127, so a pair's sum fits
// int16 where (q + 128) * x would not. vpmaddwd by ones then sums the pairs
// to int32 lanes. The block's int32 sums are the same exact integers as
// the VNNI build's, and the fp32 chain is the same, so the outputs are the
// same bits. Needs xq in [-127, 127] (QuantizeRowsQ8's range: vpsignb
// cannot negate -128). The fp32 sums live in a.out (L1), which starts at
// zero; the registers hold the block's int32 sums of MR rows x NL lines.
template <int MR, int NL>
void PassAvx2(const PassArgs& a, int line0) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int l = 0; l < NL; ++l) _mm256_storeu_ps(a.out + i * a.ldo + 8 * (line0 + l), _mm256_setzero_ps());
  }
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < a.nb; ++b) {
    const uint8_t* blk = a.P + b * kBlockBytes;
    __m256i dot[MR][NL];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int l = 0; l < NL; ++l) dot[i][l] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      __m256i w[NL], aw[NL];
#pragma GCC unroll 4
      for (int l = 0; l < NL; ++l) {
        const uint8_t* line = blk + QuadOffset(q, 8 * (line0 + l));
        w[l] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(line)), flip);  // q
        aw[l] = _mm256_abs_epi8(w[l]);
        if (a.pf > 0 && l % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(line) + a.pf, _MM_HINT_T0);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        int32_t quad;
        std::memcpy(&quad, a.xq + i * a.K + b * kQ8Block + 4 * q, 4);
        const __m256i xb = _mm256_set1_epi32(quad);
#pragma GCC unroll 4
        for (int l = 0; l < NL; ++l) {
          const __m256i pairs = _mm256_maddubs_epi16(aw[l], _mm256_sign_epi8(xb, w[l]));
          dot[i][l] = _mm256_add_epi32(dot[i][l], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    if (a.pf > 0) _mm_prefetch(reinterpret_cast<const char*>(blk) + a.pf, _MM_HINT_T0);  // the scales' line
    __m256 dw[NL];
#pragma GCC unroll 4
    for (int l = 0; l < NL; ++l) {
      dw[l] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * (line0 + l))));
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 dx = _mm256_set1_ps(a.xs[i * a.nb + b]);
#pragma GCC unroll 4
      for (int l = 0; l < NL; ++l) {
        float* o = a.out + i * a.ldo + 8 * (line0 + l);
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i][l]), _mm256_mul_ps(dw[l], dx),
                                            _mm256_loadu_ps(o)));
      }
    }
  }
}

// One group's 32 outputs for rows [0, MR): a pass of NL lines at a time.
template <int MR, int NL>
void GroupAvx2(const PassArgs& a) {
  for (int line0 = 0; line0 < 4; line0 += NL) PassAvx2<MR, NL>(a, line0);
}

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
// interleaved ones (docs/benchmarks.md §7). A lone row (M == 1) runs the
// AVX2 build instead (GemvQ8KMajorDot); Pass<1, 2> takes the row left
// over past a multiple of kMaxRows (M = 7, 13, ...).
const PassFn kPasses[kMaxRows + 1][3] = {{},
                                         {nullptr, Pass<1, 2>},
                                         {nullptr, Pass<2, 2>, Pass<2, 4>},
                                         {nullptr, Pass<3, 2>, Pass<3, 4>},
                                         {nullptr, Pass<4, 2>},
                                         {nullptr, Pass<5, 2>},
                                         {nullptr, Pass<6, 2>}};

// AVX2, by rows (1 .. kMaxRowsAvx2), a group at a time: one row takes the
// group's 4 lines in one pass (16 ymm: 4 lines, their |q|, 4 sums, x, the
// constants), more rows take 2 lines a pass.
constexpr int kMaxRowsAvx2 = 4;
const PassFn kGroupsAvx2[kMaxRowsAvx2 + 1] = {nullptr, GroupAvx2<1, 4>, GroupAvx2<2, 2>, GroupAvx2<3, 2>,
                                              GroupAvx2<4, 2>};

// Rows [0, mr) of x against `groups` (<= kBlockGroups) groups from a.P:
// the widest passes the registers hold, then narrower ones for the rest.
void Block(int mr, int groups, PassArgs a, GemvIsa isa) {
  const uint8_t* P = a.P;
  float* out = a.out;
  for (int g = 0; g < groups;) {
    const int ng = isa == GemvIsa::kAvx512 && kPasses[mr][2] != nullptr && groups - g >= 2 ? 2 : 1;
    a.P = P + g * a.gstride;
    a.out = out + g * G;
    (isa == GemvIsa::kAvx512 ? kPasses[mr][ng] : kGroupsAvx2[mr])(a);
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
  GemvQ8KMajorDot(xq, xs, M, K, P, N, n0, n1, y, ldy, GemvQ8DotIsa());
}

void GemvQ8KMajorDot(const int8_t* xq, const float* xs, int64_t M, int64_t K, const uint8_t* P, int64_t N,
                     int64_t n0, int64_t n1, float* y, int64_t ldy, GemvIsa isa) {
  n1 = std::min(n1, N);
  if (M <= 0 || n0 >= n1) return;
  // One row of x is a plain stream of the pack: AVX2's pass (four lines, no
  // vpdpbusd chain) keeps it at least as fast, and the bits are the same.
  if (M == 1 && isa == GemvIsa::kAvx512) isa = GemvIsa::kAvx2;
  const int64_t nb = K / kQ8Block;
  thread_local std::vector<int32_t> bias;  // reused: no allocation per call
  if (isa == GemvIsa::kAvx512) {           // the AVX2 build needs no bias
    if (static_cast<int64_t>(bias.size()) < M * nb) bias.resize(M * nb);
    for (int64_t r = 0; r < M * nb; ++r) {
      int32_t s = 0;
      for (int64_t i = 0; i < kQ8Block; ++i) s += xq[r * kQ8Block + i];
      bias[r] = -128 * s;
    }
  }
  alignas(64) float out[kMaxRows * kBlockGroups * G];
  const int64_t pf = GemvPrefetchBytes(), max_rows = isa == GemvIsa::kAvx512 ? kMaxRows : kMaxRowsAvx2;
  PassArgs a{nullptr, nullptr, nullptr, K, nb, nullptr, nb * kBlockBytes, pf, out, 0};
  for (int64_t gb = n0 / G; gb * G < n1; gb += kBlockGroups) {
    const int groups = static_cast<int>(std::min<int64_t>(kBlockGroups, (n1 - gb * G + G - 1) / G));
    const int64_t c0 = std::max(n0, gb * G), c1 = std::min(n1, (gb + groups) * G);
    // The first rows stream the block from DRAM; the others find it in L2,
    // and the second pass fetches the next block's lines meanwhile.
    const int64_t next_pf = (gb + kBlockGroups) * G < n1 ? kBlockGroups * a.gstride : 0;
    for (int64_t m0 = 0; m0 < M; m0 += max_rows) {
      const int mr = static_cast<int>(std::min<int64_t>(max_rows, M - m0));
      a.xq = xq + m0 * K;
      a.xs = xs + m0 * nb;
      a.bias = bias.data() + m0 * nb;
      a.P = P + gb * a.gstride;
      a.pf = m0 == 0 ? pf : m0 == max_rows ? next_pf : 0;
      a.ldo = groups * G;
      Block(mr, groups, a, isa);
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
