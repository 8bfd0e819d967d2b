#include "common/kernels/gemm_amx.h"

#include <immintrin.h>

#include <algorithm>

#include "common/util/cpu_features.h"

namespace pdserve {

bool AmxSplitAvailable() { return IsaSupported(HostCpuFeatures(), Isa::kAmx); }

bool AmxSplitSupported(int64_t M, int64_t N, int64_t K) {
  return M > 0 && N > 0 && K > 0 && K % 32 == 0 && N % 16 == 0;
}

namespace {

constexpr int64_t kTerms = 3;        // xh, xm, xl
constexpr int64_t kTileWords = 256;  // 16 rows x 64 bytes

// One block of 16 rows of x: per 32 k, the three terms' B tiles.
int64_t BlockWords(int64_t K) { return K / 32 * kTerms * kTileWords; }

// palette 1; tiles 0-3 C, 4-5 A (W), 6-7 B (x): all 16 rows x 64 bytes.
// Static, so the compiler cannot drop its bytes (ldtilecfg is an asm).
struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
constexpr TileConfig kTileConfig = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

// The tile intrinsics are asm statements without a memory clobber: order
// them against the plain reads of what they store at p.
inline void CompilerBarrier(const void* p) { __asm__ volatile("" : : "r"(p) : "memory"); }

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,amx-tile,amx-bf16")
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// 16 rows of 16 32-bit values, transposed in registers (bits unchanged).
inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], 128-bit lane L: rows 4i..4i+3 at column 4L + j
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; ++j) {  // column 4L + j = lanes L of r[j], r[4 + j], r[8 + j], r[12 + j]
    const __m512 t0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), t1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
    const __m512 t2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    const __m512 t3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
    t[j] = _mm512_shuffle_f32x4(t0, t2, 0x88);
    t[8 + j] = _mm512_shuffle_f32x4(t0, t2, 0xDD);
    t[4 + j] = _mm512_shuffle_f32x4(t1, t3, 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(t1, t3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// 32 floats of one row of x -> per term 16 words, word j = bf16 of k = 2j
// (low half) and k = 2j + 1 (high half). Truncation: xh is the high half
// of x, r = x - xh is exact, xm the high half of r, xl = r - xm exact.
inline void SplitPairs(const float* p, __m512i out[kTerms]) {
  alignas(64) static constexpr uint16_t kHighHalves[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                           23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                           45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  const __m512i idx = _mm512_load_si512(kHighHalves);
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 v[2] = {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)}, rem[2], low[2];
  for (int h = 0; h < 2; ++h) {
    rem[h] = _mm512_sub_ps(v[h], _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v[h]), mask)));
    low[h] = _mm512_sub_ps(rem[h], _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rem[h]), mask)));
  }
  const auto pairs = [&](const __m512* s) {
    return _mm512_permutex2var_epi16(_mm512_castps_si512(s[0]), idx, _mm512_castps_si512(s[1]));
  };
  out[0] = pairs(v);
  out[1] = pairs(rem);
  out[2] = pairs(low);
}

// Packs k-step ks of block b: rows[t][row of x][k-pair], transposed per
// term into the B tile [k-pair][row of x].
void PackStep(const float* x, int64_t M, int64_t K, int64_t b, int64_t ks, uint32_t* tiles) {
  __m512i words[kTerms][16];
  for (int mm = 0; mm < 16; ++mm) {
    const int64_t m = b * kAmxSplitRowBlock + mm;
    __m512i split[kTerms];
    if (m < M) {
      SplitPairs(x + m * K + ks * 32, split);
    } else {
      for (auto& s : split) s = _mm512_setzero_si512();
    }
    for (int t = 0; t < kTerms; ++t) words[t][mm] = split[t];
  }
  for (int t = 0; t < kTerms; ++t) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(words[t][i]);
    Transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(reinterpret_cast<float*>(tiles + t * kTileWords + i * 16), r[i]);
  }
}

// C tile (16 W rows x 16 rows of x, row-major in c) -> y [row of x][n],
// `rows` rows of x.
inline void StoreTransposed(const float* c, int64_t rows, float* y, int64_t ldy) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(c + i * 16);
  Transpose16(r);
  for (int64_t i = 0; i < rows; ++i) _mm512_storeu_ps(y + i * ldy, r[i]);
}

// NA x 2 C tiles: W rows [0, 16 NA) at w, x blocks b (at xb) and b + 1.
// C tile (a, m) lands at c + (2a + m) * 256.
template <int NA>
void Block(const uint32_t* xb, int64_t block_words, const uint16_t* w, int64_t K, float* c) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (NA == 2) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t w_stride = K * 2;
  for (int64_t ks = 0; ks < K / 32; ++ks) {
    _tile_loadd(4, w + ks * 32, w_stride);
    if constexpr (NA == 2) _tile_loadd(5, w + 16 * K + ks * 32, w_stride);
    const uint32_t* b0 = xb + ks * kTerms * kTileWords;
#pragma GCC unroll 3
    for (int t = 0; t < kTerms; ++t) {
      _tile_loadd(6, b0 + t * kTileWords, 64);
      _tile_loadd(7, b0 + block_words + t * kTileWords, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      if constexpr (NA == 2) {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  CompilerBarrier(c);  // the last reads of c (StoreTransposed) before the tiles overwrite it
  _tile_stored(0, c, 64);
  _tile_stored(1, c + kTileWords, 64);
  if constexpr (NA == 2) {
    _tile_stored(2, c + 2 * kTileWords, 64);
    _tile_stored(3, c + 3 * kTileWords, 64);
  }
  CompilerBarrier(c);
}

}  // namespace

void AmxSplitPackX(const float* x, int64_t M, int64_t K, int64_t b0, int64_t b1, uint32_t* packed) {
  const int64_t bw = BlockWords(K);
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t ks = 0; ks < K / 32; ++ks) PackStep(x, M, K, b, ks, packed + b * bw + ks * kTerms * kTileWords);
  }
}

void AmxSplitGemm(const uint32_t* packed, int64_t M, int64_t K, const uint16_t* W, int64_t n0, int64_t n1,
                  float* y, int64_t ldy) {
  _tile_loadconfig(&kTileConfig);
  const int64_t bw = BlockWords(K), blocks = AmxSplitRowBlocks(M);
  // Cache blocking: ~1 MiB of packed x stays in L2 while each 32-row panel
  // of W (reused across it from L1/L2) streams through once per chunk.
  const int64_t chunk = std::max<int64_t>(2, ((int64_t{1} << 20) / (bw * 4)) & ~int64_t{1});
  alignas(64) float c[4 * kTileWords];
  for (int64_t c0 = 0; c0 < blocks; c0 += chunk) {
    const int64_t c1 = std::min(blocks, c0 + chunk);
    for (int64_t n = n0; n < n1; n += 32) {
      const int na = n1 - n >= 32 ? 2 : 1;
      for (int64_t b = c0; b < c1; b += 2) {
        if (na == 2) {
          Block<2>(packed + b * bw, bw, W + n * K, K, c);
        } else {
          Block<1>(packed + b * bw, bw, W + n * K, K, c);
        }
        for (int a = 0; a < na; ++a) {
          for (int h = 0; h < 2; ++h) {
            const int64_t m = (b + h) * kAmxSplitRowBlock;
            const int64_t rows = std::min<int64_t>(kAmxSplitRowBlock, M - m);
            if (rows > 0) StoreTransposed(c + (2 * a + h) * kTileWords, rows, y + m * ldy + n + 16 * a, ldy);
          }
        }
      }
    }
  }
  _tile_release();
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

int64_t AmxSplitPackedWords(int64_t M, int64_t K) { return AmxSplitRowBlocks(M) * BlockWords(K); }

}  // namespace pdserve
