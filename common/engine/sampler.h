// Token sampling exactly as docs/model.md "Sampling" pins it. No LibTorch:
// works on a row of fp32 logits.
#pragma once

#include <cstdint>

#include "common/model/sampling_params.h"

namespace pdserve {

// splitmix64 finaliser (mod 2^64).
uint64_t SplitMix64(uint64_t x);

// u(seed, n) = (splitmix64(seed ^ splitmix64(n)) >> 11) * 2^-53, in [0, 1).
double CounterUniform(uint64_t seed, uint64_t n);

// Argmax, ties to the lower id.
int64_t Argmax(const float* logits, int64_t vocab);

// The n-th generated token (n = 0 is the one sampled from the prefill
// logits). Pure: the same (logits, params, n) always give the same id.
int64_t SampleToken(const float* logits, int64_t vocab, const SamplingParams& params, uint64_t n);

}  // namespace pdserve
