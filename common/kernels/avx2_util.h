// AVX2 helpers shared by the decode kernels (gemv_kernels.cc,
// decode_attention.cc). They are compiled for AVX2+FMA whatever the file's
// flags: call them only from such code, after the CPU check
// (GemvAvailable).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pdserve {
namespace avx2 {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// 8 fp32 values; bf16 (raw uint16, the upper half of an fp32) widened.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) {
  __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// An int8 block dot product: the 32 products w[i] * x[i] summed in pairs
// of 4 (vpmaddubsw, vpmaddwd), as 8 exact int32 lanes in fp32. The caller
// keeps |w| * |x| sums of two in int16 (|x|, |w| <= 127 in Q8_0; |w| <= 12
// for MXFP4 codes).
inline __m256 Int8BlockDot(__m256i w, __m256i x) {
  const __m256i ax = _mm256_sign_epi8(x, x);  // |x| as unsigned
  const __m256i sw = _mm256_sign_epi8(w, x);  // w with the sign of x
  const __m256i pairs = _mm256_maddubs_epi16(ax, sw);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// One value, as Load8 reads it.
inline float Load1(const float* p) { return *p; }
inline float Load1(const uint16_t* p) {
  uint32_t bits = static_cast<uint32_t>(*p) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// [HorizontalSum(a), .., HorizontalSum(d)] at once (a different order of
// the same additions: pairs first, then the halves).
inline __m128 HorizontalSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

#pragma GCC pop_options

}  // namespace avx2
}  // namespace pdserve
