// AVX-512 helpers shared by the decode kernels (gemv_avx512.cc,
// gemv_kmajor.cc, gemv_bf16dot.cc, decode_attention.cc). They are compiled for AVX-512F whatever the file's
// flags: call them only from such code, after the CPU check.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace pdserve {
namespace avx512 {

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

// 16 bf16 values (raw uint16, the upper half of an fp32) widened exactly to
// fp32: zero-extend, shift into the upper half (avx2::Load8's twin).
inline __m512 Load16(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// The sums of 4 accumulators at once, [sum(a), sum(b), sum(c), sum(d)], in
// a fixed tree (lanes i + i+8, then i + i+4, i + i+2, i + i+1: the tree of
// a one-accumulator reduce), 14 instructions instead of ~36, each step on
// two or four accumulators per instruction.
inline __m128 Sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // [a8 | b8] with a8[i] = a[i] + a[i + 8] (quarters 0,1 + quarters 2,3).
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // [a4 | b4 | c4 | d4] with a4[i] = a8[i] + a8[i + 4].
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  // Per quarter [x0 x1 x2 x3]: w = [x0 + x2, x1 + x3, ..], then w0 + w1.
  const __m512 w = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4E));
  const __m512 r = _mm512_add_ps(w, _mm512_permute_ps(w, 0xB1));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), r));
}

#pragma GCC pop_options

}  // namespace avx512
}  // namespace pdserve
