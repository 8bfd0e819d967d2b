// The block schedule of gemv_kernels.h's summation order, written once for
// both builds of the fp32/bf16 decode kernels (gemv_kernels.cc: AVX2,
// gemv_avx512.cc: AVX-512): which 16-wide blocks of k feed which chain, and
// in what order the weights are read.
//
// Include it under the including file's `#pragma GCC target` ISA: the
// template then carries that file's ISA, so the step lambdas (which use its
// intrinsics) inline into it and the kernels keep their registers.
#pragma once

#include <cstdint>

namespace pdserve::gemv_chains {

// Calls step0(k0, pf) for the even 16-wide blocks (k0 = 0, 32, ...) and
// step1(k0, pf) for the odd ones, nb blocks in all, each chain in order of k.
//   kInterleave: the chains alternate block by block, so the weights are
//     read once, in order, with `pf` (the software prefetch distance) on
//     every step;
//   otherwise chain 0's pass, then chain 1's, which reads the same weight
//     rows again from L1 and so prefetches nothing (pf = 0). For callers
//     whose two chains' accumulators do not fit the register file at once.
// The 8-wide tail block and the reduction are the caller's.
template <bool kInterleave, typename Step0, typename Step1>
inline void ForEachBlock(int64_t nb, int64_t pf, const Step0& step0, const Step1& step1) {
  if constexpr (kInterleave) {
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      step0(16 * b, pf);
      step1(16 * b + 16, pf);
    }
    if (b < nb) step0(16 * b, pf);
  } else {
    for (int64_t b = 0; b < nb; b += 2) step0(16 * b, pf);
    for (int64_t b = 1; b < nb; b += 2) step1(16 * b, int64_t{0});
  }
}

}  // namespace pdserve::gemv_chains
