// SamplingParams: how a generation picks its tokens (docs/model.md,
// "Sampling"). A plain struct, so that every layer can carry it; the
// sampler itself is common/engine/sampler.h.
#pragma once

#include <cstdint>

namespace pdserve {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  float top_p = 1.0f;        // 0 or >= 1 keeps all
  int64_t top_k = 0;         // 0: no limit
  uint64_t seed = 0;
};

}  // namespace pdserve
