#include "common/engine/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "absl/base/casts.h"
#include "common/util/cpu_features.h"

// This file is compiled with -ffp-contract=off (common/CMakeLists.txt): a
// multiply and an add the compiler fused in one path and not in the other
// would change the bits between paths. The fused multiply-adds below are
// written out.

namespace pdserve {
namespace {

constexpr double kLog2e = 0x1.71547652b82fep+0;
// ln 2 = kLn2Hi + kLn2Lo, kLn2Hi with 21 trailing zero bits (fdlibm's split).
constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
// Added to x log2(e), rounds it to the nearest integer k and leaves k in the
// low bits: bits(k + kShifter) - bits(kShifter) = k for |k| < 2^51.
constexpr double kShifter = 0x1.8p52;
constexpr double kUnderflow = -746.0;  // below it e^x < 2^-1076 rounds to 0
// 2^(k + 64) has a normal exponent for every k >= -1076 reached; the result
// is then scaled by 2^-64, exactly or (subnormal results) rounded once.
constexpr uint64_t kScaleBias = 1023 + 64;
constexpr double kUnscale = 0x1p-64;
// 1/n!, n = 0..13, Horner's from the top.
constexpr double kTaylor[14] = {1.0,
                                1.0,
                                0x1.0000000000000p-1,
                                0x1.5555555555555p-3,
                                0x1.5555555555555p-5,
                                0x1.1111111111111p-7,
                                0x1.6c16c16c16c17p-10,
                                0x1.a01a01a01a01ap-13,
                                0x1.a01a01a01a01ap-16,
                                0x1.71de3a556c734p-19,
                                0x1.27e4fb7789f5cp-22,
                                0x1.ae64567f544e4p-26,
                                0x1.1eed8eff8d898p-29,
                                0x1.6124613a86d09p-33};
constexpr int kLanes = 8;  // the running sums of z

uint64_t Bits(double x) { return absl::bit_cast<uint64_t>(x); }
double FromBits(uint64_t b) { return absl::bit_cast<double>(b); }

// z from the eight running sums, in SoftmaxDouble's stated tree.
double SumLanes(const double* s) { return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])); }

// Pass 2 for ids [begin, vocab), one at a time: e_i into p, lane sums and
// extremes updated. The portable path runs it over every id; the AVX2 path
// over the tail past its last full group of eight.
void ExpTail(double* p, int64_t begin, int64_t vocab, double max_x, double* lanes, double* min_e, double* max_e) {
  for (int64_t i = begin; i < vocab; ++i) {
    const double e = ExpNonPositive(p[i] - max_x);
    p[i] = e;
    lanes[i % kLanes] += e;
    *min_e = std::min(*min_e, e);
    *max_e = std::max(*max_e, e);
  }
}

// Pass 3 for ids [begin, vocab): p_i = e_i / z, and the extremes.
void Divide(double* p, int64_t begin, int64_t vocab, double z, double min_e, double max_e, SoftmaxExtremes* extremes) {
  for (int64_t i = begin; i < vocab; ++i) p[i] /= z;
  // Division by z > 0 is monotone, so these are p's own extremes.
  extremes->max_p = max_e / z;
  extremes->min_p = min_e / z;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// ExpNonPositive on four lanes, operation for operation.
__m256d Exp4(__m256d x) {
  const __m256d shifter = _mm256_set1_pd(kShifter);
  const __m256d k_shifted = _mm256_fmadd_pd(x, _mm256_set1_pd(kLog2e), shifter);
  const __m256d k = _mm256_sub_pd(k_shifted, shifter);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(kLn2Lo), r);
  __m256d poly = _mm256_set1_pd(kTaylor[13]);
  for (int n = 12; n >= 0; --n) poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(kTaylor[n]));
  const __m256i k_int = _mm256_sub_epi64(_mm256_castpd_si256(k_shifted), _mm256_castpd_si256(shifter));
  const __m256d scale = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_add_epi64(k_int, _mm256_set1_epi64x(static_cast<int64_t>(kScaleBias))), 52));
  const __m256d e = _mm256_mul_pd(_mm256_mul_pd(poly, scale), _mm256_set1_pd(kUnscale));
  const __m256d under = _mm256_cmp_pd(x, _mm256_set1_pd(kUnderflow), _CMP_LT_OQ);  // false for NaN
  return _mm256_andnot_pd(under, e);
}

bool SoftmaxAvx2(const float* logits, int64_t vocab, double t, double* p, SoftmaxExtremes* extremes) {
  const int64_t full = vocab / kLanes * kLanes;
  const __m256d tv = _mm256_set1_pd(t);
  __m256d maxv = _mm256_set1_pd(-INFINITY);
  for (int64_t i = 0; i < full; i += 4) {
    const __m256d x = _mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(logits + i)), tv);
    _mm256_storeu_pd(p + i, x);
    maxv = _mm256_max_pd(x, maxv);  // a NaN x keeps maxv; the exp pass meets it
  }
  double max4[4];
  _mm256_storeu_pd(max4, maxv);
  double max_x = std::max(std::max(max4[0], max4[1]), std::max(max4[2], max4[3]));
  for (int64_t i = full; i < vocab; ++i) max_x = std::max(max_x, p[i] = static_cast<double>(logits[i]) / t);

  const __m256d mv = _mm256_set1_pd(max_x);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // lanes 0-3, 4-7
  __m256d min_v = _mm256_set1_pd(INFINITY), max_v = _mm256_setzero_pd();
  for (int64_t i = 0; i < full; i += kLanes) {
    const __m256d e0 = Exp4(_mm256_sub_pd(_mm256_loadu_pd(p + i), mv));
    const __m256d e1 = Exp4(_mm256_sub_pd(_mm256_loadu_pd(p + i + 4), mv));
    _mm256_storeu_pd(p + i, e0);
    _mm256_storeu_pd(p + i + 4, e1);
    lo = _mm256_add_pd(lo, e0);
    hi = _mm256_add_pd(hi, e1);
    min_v = _mm256_min_pd(min_v, _mm256_min_pd(e0, e1));
    max_v = _mm256_max_pd(max_v, _mm256_max_pd(e0, e1));
  }
  double lanes[kLanes], mins[4], maxs[4];
  _mm256_storeu_pd(lanes, lo);
  _mm256_storeu_pd(lanes + 4, hi);
  _mm256_storeu_pd(mins, min_v);
  _mm256_storeu_pd(maxs, max_v);
  double min_e = std::min(std::min(mins[0], mins[1]), std::min(mins[2], mins[3]));
  double max_e = std::max(std::max(maxs[0], maxs[1]), std::max(maxs[2], maxs[3]));
  ExpTail(p, full, vocab, max_x, lanes, &min_e, &max_e);

  const double z = SumLanes(lanes);
  if (!std::isfinite(z)) return false;
  const __m256d zv = _mm256_set1_pd(z);
  for (int64_t i = 0; i < full; i += 4) _mm256_storeu_pd(p + i, _mm256_div_pd(_mm256_loadu_pd(p + i), zv));
  Divide(p, full, vocab, z, min_e, max_e, extremes);
  return true;
}

#pragma GCC pop_options

}  // namespace

double ExpNonPositive(double x) {
  if (x < kUnderflow) return 0.0;  // false for NaN, which goes on and stays NaN
  const double k_shifted = std::fma(x, kLog2e, kShifter);
  const double k = k_shifted - kShifter;
  double r = std::fma(-k, kLn2Hi, x);
  r = std::fma(-k, kLn2Lo, r);
  double poly = kTaylor[13];
  for (int n = 12; n >= 0; --n) poly = std::fma(poly, r, kTaylor[n]);
  const double scale = FromBits((Bits(k_shifted) - Bits(kShifter) + kScaleBias) << 52);
  return poly * scale * kUnscale;
}

bool SoftmaxDoublePortable(const float* logits, int64_t vocab, double t, double* p, SoftmaxExtremes* extremes) {
  double max_x = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max_x = std::max(max_x, p[i] = static_cast<double>(logits[i]) / t);
  double lanes[kLanes] = {};
  double min_e = INFINITY, max_e = 0.0;
  ExpTail(p, 0, vocab, max_x, lanes, &min_e, &max_e);
  const double z = SumLanes(lanes);
  if (!std::isfinite(z)) return false;
  Divide(p, 0, vocab, z, min_e, max_e, extremes);
  return true;
}

bool SoftmaxDouble(const float* logits, int64_t vocab, double temperature, double* p, SoftmaxExtremes* extremes) {
  // AVX2 + FMA, with the OS saving YMM state (cpu_features.h).
  static const bool avx2 = IsaSupported(HostCpuFeatures(), Isa::kAvx2);
  return avx2 ? SoftmaxAvx2(logits, vocab, temperature, p, extremes)
              : SoftmaxDoublePortable(logits, vocab, temperature, p, extremes);
}

}  // namespace pdserve
