// The vector types the fused attention kernels (decode_attention.cc,
// prefill_attention.cc) are written against, one per ISA, each compiled for
// its ISA whatever the including file's flags:
//   - attention_isa::avx2::Vec (8 fp32 lanes, 16 registers; AVX2 + FMA);
//   - attention_isa::avx512::Vec (16 lanes, 32 registers; AVX-512F);
// with Zero, Set1, Load(float*), Load(uint16_t* bf16), LoadPairs (bf16 as
// even and odd lanes), StorePairs, Fma, Add, Sub, Mul,
// Max, Round, Pow2, Scale2, KeepInRange, AllEqual, Store, Sum, Sum4, MaxLanes,
// and each namespace's Exp(VecT) and Exp2(VecT) (attention_exp.inc). Call
// them only after the CPU check
// (DecodeAttnIsaAvailable).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "common/kernels/avx2_util.h"
#include "common/kernels/avx512_util.h"

namespace pdserve {
namespace attention_isa {

namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma")

struct Vec {
  static constexpr int64_t kWidth = 8;
  static constexpr int kRegs = 16;
  static __m256 Zero() { return _mm256_setzero_ps(); }
  static __m256 Set1(float x) { return _mm256_set1_ps(x); }
  template <typename T>
  static __m256 Load(const T* p) { return ::pdserve::avx2::Load8(p); }
  // 2 * kWidth bf16 values: *even = p[0, 2, ..], *odd = p[1, 3, ..], exactly
  // (one load and two logic ops, no cross-lane widening).
  static void LoadPairs(const uint16_t* p, __m256* even, __m256* odd) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // p[2i] = even[i], p[2i + 1] = odd[i]: LoadPairs' order undone.
  static void StorePairs(float* p, __m256 even, __m256 odd) {
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
  static __m256 Fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 Add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static void Store(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
  static float Sum(__m256 x) { return ::pdserve::avx2::HorizontalSum(x); }
  static __m128 Sum4(__m256 a, __m256 b, __m256 c, __m256 d) { return ::pdserve::avx2::HorizontalSum4(a, b, c, d); }
  static __m256 Sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
  static __m256 Mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static __m256 Max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
  static float MaxLanes(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  static __m256 Round(__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for whole n in [-126, 127].
  static __m256 Pow2(__m256 n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // Lanes where lo <= x <= hi keep v; the others take `other`.
  static __m256 KeepInRange(__m256 v, __m256 lo, __m256 hi, float x, __m256 other) {
    const __m256 xv = _mm256_set1_ps(x);
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(lo, xv, _CMP_LE_OQ), _mm256_cmp_ps(xv, hi, _CMP_LE_OQ));
    return _mm256_blendv_ps(other, v, in);
  }
  static bool AllEqual(__m256 a, __m256 b) { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)) == 0xFF; }
  // p * 2^n for whole n in [-126, 127].
  static __m256 Scale2(__m256 p, __m256 n) { return _mm256_mul_ps(p, Pow2(n)); }
};

#include "common/kernels/attention_exp.inc"

#pragma GCC pop_options
}  // namespace avx2

namespace avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

struct Vec {
  static constexpr int64_t kWidth = 16;
  static constexpr int kRegs = 32;
  static __m512 Zero() { return _mm512_setzero_ps(); }
  static __m512 Set1(float x) { return _mm512_set1_ps(x); }
  static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 Load(const uint16_t* p) { return ::pdserve::avx512::Load16(p); }
  static void LoadPairs(const uint16_t* p, __m512* even, __m512* odd) {
    const __m512i x = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static void StorePairs(float* p, __m512 even, __m512 odd) {
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    _mm512_storeu_ps(p, _mm512_permutex2var_ps(even, lo, odd));
    _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(even, hi, odd));
  }
  static __m512 Fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 Add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static void Store(float* p, __m512 x) { _mm512_storeu_ps(p, x); }
  static float Sum(__m512 x) { return _mm512_reduce_add_ps(x); }
  static __m128 Sum4(__m512 a, __m512 b, __m512 c, __m512 d) { return ::pdserve::avx512::Sum4(a, b, c, d); }
  static __m512 Sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
  static __m512 Mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512 Max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
  static float MaxLanes(__m512 x) { return _mm512_reduce_max_ps(x); }
  static __m512 Round(__m512 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for whole n in [-126, 127].
  static __m512 Pow2(__m512 n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static __m512 KeepInRange(__m512 v, __m512 lo, __m512 hi, float x, __m512 other) {
    const __m512 xv = _mm512_set1_ps(x);
    const __mmask16 in = _mm512_cmp_ps_mask(lo, xv, _CMP_LE_OQ) & _mm512_cmp_ps_mask(xv, hi, _CMP_LE_OQ);
    return _mm512_mask_blend_ps(in, other, v);
  }
  static bool AllEqual(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ) == 0xFFFF; }
  // p * 2^n for whole n (VSCALEFPS: exact, no integer detour).
  static __m512 Scale2(__m512 p, __m512 n) { return _mm512_scalef_ps(p, n); }
};

#include "common/kernels/attention_exp.inc"

#pragma GCC diagnostic pop
#pragma GCC pop_options
}  // namespace avx512

}  // namespace attention_isa
}  // namespace pdserve
