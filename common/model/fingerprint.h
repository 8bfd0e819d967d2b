// ModelFingerprint: a hash of a model's config and weights. A decode worker
// accepts a KV hand-off only from a prefill worker with the same fingerprint.
#pragma once

#include <string>

#include "common/model/weights.h"

namespace pdserve {

// 16 hex digits over the config's architecture fields, every tensor's name,
// shape, dtype and bytes, in checkpoint order (so the in-memory weights
// dtype, f32, bf16 or int8 Q8_0, is part of it). 0.6 s for the 502M (fp32)
// model; deterministic across processes and machines of one endianness.
std::string ModelFingerprint(const ModelWeights& weights);

}  // namespace pdserve
