#include "common/kernels/mxfp4.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/kernels/avx2_util.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/mxfp4_avx512.h"
#include "common/util/cpu_features.h"

namespace pdserve {
namespace {

// Code of element k (< 32) of a 16-byte block: byte k / 2, low nibble for
// even k.
inline int CodeAt(const uint8_t* blk, int k) { return (blk[k / 2] >> (4 * (k & 1))) & 0x0F; }

// ((h0+h4) + (h2+h6)) + ((h1+h5) + (h3+h7)): avx2::HorizontalSum's tree.
float Tree8(const float* h) {
  float s[4];
  for (int i = 0; i < 4; ++i) s[i] = h[i] + h[i + 4];
  return (s[0] + s[2]) + (s[1] + s[3]);
}

float AddBias(float s, const float* bias, int64_t n) { return bias != nullptr ? s + bias[n] : s; }

// The Fma order (mxfp4.h) over a dequantized row w and plain x.
float FmaOrderSum(const float* w, const float* x, int64_t K) {
  float acc[16] = {};
  for (int64_t b = 0; b < K; b += kMxfp4Block) {
    for (int l = 0; l < 16; ++l) {
      const int64_t k = b + 2 * l;
      float t = w[k] * x[k];
      t = std::fma(w[k + 1], x[k + 1], t);
      acc[l] = acc[l] + t;
    }
  }
  float h[8];
  for (int i = 0; i < 8; ++i) h[i] = acc[i] + acc[i + 8];
  return Tree8(h);
}

// Lane j's exact int sum in block `blk` against its plain int8 x (the Dot
// order, mxfp4.h).
int32_t DotLane(const uint8_t* blk, const int8_t* xq, int j) {
  int32_t sum = 0;
  for (int i = 0; i < 4; ++i) {
    const int k = j < 4 ? 8 * j + 2 * i : 8 * (j - 4) + 2 * i + 1;
    sum += int32_t{kFp4Doubled[CodeAt(blk, k)]} * xq[k];
  }
  return sum;
}

// The Dot order over row n and one plain row of xq (xs: its K/32 scales).
float DotOrderSum(const Mxfp4Matrix& W, int64_t n, const int8_t* xq, const float* xs) {
  const float* half = E8m0Table() + 256;
  const uint8_t* blocks = W.row_blocks(n);
  const uint8_t* scales = W.row_scales(n);
  float acc[2][8] = {};
  for (int64_t b = 0; b < Mxfp4RowScales(W.K); ++b) {
    const float d = half[scales[b]] * xs[b];
    for (int j = 0; j < 8; ++j) {
      const int32_t dot = DotLane(blocks + b * kMxfp4BlockBytes, xq + b * kMxfp4Block, j);
      acc[b & 1][j] = std::fma(static_cast<float>(dot), d, acc[b & 1][j]);
    }
  }
  float h[8];
  for (int j = 0; j < 8; ++j) h[j] = acc[0][j] + acc[1][j];
  return Tree8(h);
}

// Each block of 32 as its even elements, then its odd ones (and back).
template <typename T>
void PackBlocks(const T* in, int64_t count, T* out) {
  for (int64_t r = 0; r < count; r += kMxfp4Block) {
    for (int i = 0; i < 16; ++i) {
      out[r + i] = in[r + 2 * i];
      out[r + 16 + i] = in[r + 2 * i + 1];
    }
  }
}
template <typename T>
void UnpackBlocks(const T* in, int64_t count, T* out) {
  for (int64_t r = 0; r < count; r += kMxfp4Block) {
    for (int i = 0; i < 16; ++i) {
      out[r + 2 * i] = in[r + i];
      out[r + 2 * i + 1] = in[r + 16 + i];
    }
  }
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// 8 weights from the codes at bit kShift of idx's lanes: the magnitude by
// vpermps of the scaled table `mag` (it reads the low 3 bits), then the
// code's sign bit xor'ed in (-(v * c) == (-v) * c, bit for bit).
template <int kShift>
inline __m256 Decode8(__m256i idx, __m256 mag) {
  const __m256i code = kShift != 0 ? _mm256_srli_epi32(idx, kShift) : idx;
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(idx, 28 - kShift), _mm256_set1_epi32(INT32_MIN));
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(mag, code), _mm256_castsi256_ps(sign));
}

// One line of blocks per 4 blocks, one of scales per 64 (b: a block index
// of the row). Inlined early: GCC 12 otherwise finds a function of
// prefetches alone free of side effects and drops its calls.
__attribute__((always_inline)) inline void Prefetch(const uint8_t* blocks, const uint8_t* scales, int64_t b,
                                                   int64_t pf) {
  if (pf <= 0 || (b & 3) != 0) return;  // one line per 4 blocks
  _mm_prefetch(reinterpret_cast<const char*>(blocks + b * kMxfp4BlockBytes) + pf, _MM_HINT_T0);
  if ((b & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(scales + b) + pf / 16, _MM_HINT_T0);
}

// Row n against M packed rows of x, the 16 Fma lanes as two ymm halves:
// lo = bytes 0-7 of each block, hi = bytes 8-15.
template <int M>
void FmaRow(const float* xp, const Mxfp4Matrix& W, int64_t n, const float* table, float* y_col, int64_t ldy,
            int64_t pf) {
  const int64_t K = W.K, nb = Mxfp4RowScales(K);
  const uint8_t* blocks = W.row_blocks(n);
  const uint8_t* scales = W.row_scales(n);
  const __m256 values = _mm256_loadu_ps(kFp4Values);  // codes 0-7: the magnitudes
  __m256 lo[M], hi[M];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) lo[m] = hi[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    Prefetch(blocks, scales, b, pf);
    const uint8_t* q = blocks + b * kMxfp4BlockBytes;
    const __m256 mag = _mm256_mul_ps(values, _mm256_broadcast_ss(table + scales[b]));
    const __m256i i0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
    const __m256i i1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8)));
    const __m256 e0 = Decode8<0>(i0, mag), o0 = Decode8<4>(i0, mag);
    const __m256 e1 = Decode8<0>(i1, mag), o1 = Decode8<4>(i1, mag);
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const float* xb = xp + m * K + b * kMxfp4Block;  // evens 0-7, 8-15, odds 0-7, 8-15
      __m256 t0 = _mm256_mul_ps(e0, _mm256_loadu_ps(xb));
      __m256 t1 = _mm256_mul_ps(e1, _mm256_loadu_ps(xb + 8));
      t0 = _mm256_fmadd_ps(o0, _mm256_loadu_ps(xb + 16), t0);
      t1 = _mm256_fmadd_ps(o1, _mm256_loadu_ps(xb + 24), t1);
      lo[m] = _mm256_add_ps(lo[m], t0);
      hi[m] = _mm256_add_ps(hi[m], t1);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) y_col[m * ldy] = AddBias(avx2::HorizontalSum(_mm256_add_ps(lo[m], hi[m])), W.bias, n);
}

// A block's 32 doubled codes as int8 in the packed order: the 16 low
// nibbles (shift 0 in the low lane), then the 16 high ones (shift 4).
inline __m256i DoubledCodes(const uint8_t* q) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                         _mm256_set1_epi8(0x0F));
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4Doubled)));
  return _mm256_shuffle_epi8(lut, codes);
}


// Row n against M packed quantized rows of x; even blocks into acc[0],
// odd ones into acc[1].
template <int M>
void DotRow(const int8_t* xq, const float* xs, const Mxfp4Matrix& W, int64_t n, const float* half, float* y_col,
            int64_t ldy, int64_t pf) {
  const int64_t K = W.K, nb = Mxfp4RowScales(K);
  const uint8_t* blocks = W.row_blocks(n);
  const uint8_t* scales = W.row_scales(n);
  __m256 acc[2][M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[0][m] = acc[1][m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    Prefetch(blocks, scales, b, pf);
    const __m256i w = DoubledCodes(blocks + b * kMxfp4BlockBytes);
    const __m256 dw = _mm256_broadcast_ss(half + scales[b]);
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(xs + m * nb + b));
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * K + b * kMxfp4Block));
      acc[b & 1][m] = _mm256_fmadd_ps(avx2::Int8BlockDot(w, x), d, acc[b & 1][m]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
    y_col[m * ldy] = AddBias(avx2::HorizontalSum(_mm256_add_ps(acc[0][m], acc[1][m])), W.bias, n);
  }
}

template <int M>
void FmaRows(const float* xp, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t pf = GemvPrefetchBytes();
  const float* table = E8m0Table();
  for (int64_t n = n0; n < n1; ++n) FmaRow<M>(xp, W, n, table, y + n, ldy, pf);
}

template <int M>
void DotRows(const int8_t* xq, const float* xs, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
             int64_t ldy) {
  const int64_t pf = GemvPrefetchBytes();
  const float* half = E8m0Table() + 256;
  for (int64_t n = n0; n < n1; ++n) DotRow<M>(xq, xs, W, n, half, y + n, ldy, pf);
}

#pragma GCC pop_options

// The scalar paths for CPUs without AVX2: x back in plain order, then the
// references.
void FmaScalar(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  thread_local std::vector<float> x;
  x.resize(M * W.K);
  UnpackBlocks(xp, M * W.K, x.data());
  GemvMxfp4Reference(x.data(), M, W, n0, n1, y, ldy);
}

void DotScalar(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
               int64_t ldy) {
  thread_local std::vector<int8_t> x;
  x.resize(M * W.K);
  UnpackBlocks(xq, M * W.K, x.data());
  GemvMxfp4DotReference(x.data(), xs, M, W, n0, n1, y, ldy);
}

}  // namespace

const float* E8m0Table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(512);
    for (int s = 0; s < 256; ++s) {
      t[s] = E8m0Value(static_cast<uint8_t>(s));
      t[256 + s] = s == 255 ? t[s] : std::ldexp(1.0f, s - 128);  // exact: >= 2^-149
    }
    return t;
  }();
  return table.data();
}

void DequantizeRowMxfp4(const Mxfp4Matrix& W, int64_t n, float* out) {
  const uint8_t* blocks = W.row_blocks(n);
  const uint8_t* scales = W.row_scales(n);
  for (int64_t k = 0; k < W.K; ++k) {
    const uint8_t* blk = blocks + k / kMxfp4Block * kMxfp4BlockBytes;
    out[k] = kFp4Values[CodeAt(blk, static_cast<int>(k % kMxfp4Block))] * E8m0Value(scales[k / kMxfp4Block]);
  }
}

void GemvMxfp4Reference(const float* x, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                        int64_t ldy) {
  std::vector<float> w(W.K);
  for (int64_t n = n0; n < n1; ++n) {
    DequantizeRowMxfp4(W, n, w.data());
    for (int64_t m = 0; m < M; ++m) y[m * ldy + n] = AddBias(FmaOrderSum(w.data(), x + m * W.K, W.K), W.bias, n);
  }
}

void GemvMxfp4DotReference(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0,
                           int64_t n1, float* y, int64_t ldy) {
  const int64_t nb = Mxfp4RowScales(W.K);
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      y[m * ldy + n] = AddBias(DotOrderSum(W, n, xq + m * W.K, xs + m * nb), W.bias, n);
    }
  }
}

void PackRowsMxfp4(const float* x, int64_t M, int64_t K, float* xp) { PackBlocks(x, M * K, xp); }

void QuantizeRowsMxfp4(const float* x, int64_t M, int64_t K, int8_t* xq, float* xs) {
  thread_local std::vector<int8_t> plain;  // reused: no allocation per call
  plain.resize(M * K);
  QuantizeRowsQ8(x, M, K, plain.data(), xs);
  PackBlocks(plain.data(), M * K, xq);
}

bool Mxfp4Available() { return GemvAvailable(); }

bool Mxfp4FmaAvx512Available() { return GemvIsaAvailable(GemvIsa::kAvx512); }

bool Mxfp4DotAvx512Available() {
  const CpuFeatures& f = HostCpuFeatures();
  return Mxfp4Available() && f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni;
}

GemvIsa GemvMxfp4FmaIsa() {
  static const GemvIsa isa =
      GemvDefaultIsa() == GemvIsa::kAvx512 && Mxfp4FmaAvx512Available() ? GemvIsa::kAvx512 : GemvIsa::kAvx2;
  return isa;
}

GemvIsa GemvMxfp4DotIsa() {
  static const GemvIsa isa =
      GemvDefaultIsa() == GemvIsa::kAvx512 && Mxfp4DotAvx512Available() ? GemvIsa::kAvx512 : GemvIsa::kAvx2;
  return isa;
}

void GemvMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy, GemvIsa isa) {
  if (isa == GemvIsa::kAvx512) return GemvMxfp4FmaAvx512(xp, M, W, n0, n1, y, ldy);
  switch (M) {
    case 1: return FmaRows<1>(xp, W, n0, n1, y, ldy);
    case 2: return FmaRows<2>(xp, W, n0, n1, y, ldy);
    case 3: return FmaRows<3>(xp, W, n0, n1, y, ldy);
    case 4: return FmaRows<4>(xp, W, n0, n1, y, ldy);
    default: return;
  }
}

void GemvMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy) {
  if (!Mxfp4Available()) return FmaScalar(xp, M, W, n0, n1, y, ldy);
  GemvMxfp4Fma(xp, M, W, n0, n1, y, ldy, GemvMxfp4FmaIsa());
}

void GemvMxfp4Dot(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1,
                  float* y, int64_t ldy, GemvIsa isa) {
  if (isa == GemvIsa::kAvx512) return GemvMxfp4DotAvx512(xq, xs, M, W, n0, n1, y, ldy);
  switch (M) {
    case 1: return DotRows<1>(xq, xs, W, n0, n1, y, ldy);
    case 2: return DotRows<2>(xq, xs, W, n0, n1, y, ldy);
    case 3: return DotRows<3>(xq, xs, W, n0, n1, y, ldy);
    case 4: return DotRows<4>(xq, xs, W, n0, n1, y, ldy);
    default: return;
  }
}

void GemvMxfp4Dot(const int8_t* xq, const float* xs, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1,
                  float* y, int64_t ldy) {
  if (!Mxfp4Available()) return DotScalar(xq, xs, M, W, n0, n1, y, ldy);
  GemvMxfp4Dot(xq, xs, M, W, n0, n1, y, ldy, GemvMxfp4DotIsa());
}

void GemmMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy, GemvIsa isa) {
  if (isa == GemvIsa::kAvx512) return GemmMxfp4FmaAvx512(xp, M, W, n0, n1, y, ldy);
  for (int64_t m = 0; m < M; m += kGemvMaxRows) {
    GemvMxfp4Fma(xp + m * W.K, std::min(kGemvMaxRows, M - m), W, n0, n1, y + m * ldy, ldy, isa);
  }
}

void GemmMxfp4Fma(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1, float* y,
                  int64_t ldy) {
  if (Mxfp4Available()) return GemmMxfp4Fma(xp, M, W, n0, n1, y, ldy, GemvMxfp4FmaIsa());
  for (int64_t m = 0; m < M; m += kGemvMaxRows) {
    FmaScalar(xp + m * W.K, std::min(kGemvMaxRows, M - m), W, n0, n1, y + m * ldy, ldy);
  }
}

const char* Mxfp4KernelName(Mxfp4Kernel kernel) {
  if (kernel == Mxfp4Kernel::kFma) {
    if (!Mxfp4Available()) return "fma scalar";
    return GemvMxfp4FmaIsa() == GemvIsa::kAvx512 ? "fma avx512" : "fma avx2";
  }
  if (!Mxfp4Available()) return "dot scalar";
  return GemvMxfp4DotIsa() == GemvIsa::kAvx512 ? "dot avx512-vnni" : "dot avx2";
}

}  // namespace pdserve
