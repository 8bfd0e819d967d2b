// The sampler's softmax: p = softmax(logits / temperature) in double, with
// the same bits on every CPU and kernel path.
//   SoftmaxDouble   p and its extremes, vectorised where AVX2 + FMA run;
//                   false when the sum is not finite (a NaN or +inf logit)
//   SoftmaxDoublePortable  the same without vector code (what runs without
//                   AVX2 + FMA; for tests)
//   ExpNonPositive  the exp it uses, one value (for tests)
// No LibTorch.
#pragma once

#include <cstdint>

namespace pdserve {

struct SoftmaxExtremes {
  double max_p = 0.0;
  double min_p = 0.0;
};

// p[i] = e_i / z with e_i = ExpNonPositive(logits[i] / temperature - max_j
// logits[j] / temperature) and z the sum of the e_i in a fixed order: eight
// running sums, sum j over the ids i = j mod 8 in increasing i, then
// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). The AVX2 kernel and
// the portable loop do the same IEEE operations in the same order, so the
// bits depend on neither the CPU nor the path (libm's exp, which this
// replaced, is a scalar call whose last bit may differ between library
// versions and ISAs). temperature > 0; p holds vocab doubles; vocab >= 1.
// Returns false, with p unspecified, when z is not finite: a NaN or +inf
// logit, or every logit -inf.
bool SoftmaxDouble(const float* logits, int64_t vocab, double temperature, double* p, SoftmaxExtremes* extremes);
bool SoftmaxDoublePortable(const float* logits, int64_t vocab, double temperature, double* p,
                           SoftmaxExtremes* extremes);

// e^x for x <= 0 within ~1 ulp: x = k ln2 + r with |r| <= ln2 / 2, exp(r) by
// its Taylor polynomial of degree 13 in fused multiply-adds, scaled by 2^k
// in two exact-or-once-rounded steps (subnormal results are right). x below
// -746 gives 0 (e^x < 2^-1076); NaN gives NaN. The value SoftmaxDouble's
// kernels compute for each lane.
double ExpNonPositive(double x);

}  // namespace pdserve
