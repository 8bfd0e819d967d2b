// ModelWeights from a Hugging Face gpt-oss checkpoint (docs/model.md,
// "gpt-oss checkpoints"): the dense tensors converted as LoadCheckpoint
// converts pdserve's own, the MXFP4 experts left in the read-only mapping.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/model/checkpoint.h"
#include "common/model/config.h"
#include "common/model/weights.h"

namespace pdserve {

// Opens `dir` (GptOssCheckpoint::Open: its errors, naming the file or the
// tensor) and builds the weights of `config` (a kGptOss config, read from
// the same directory): q, k|v and o with their biases, sinks, norms, router
// and its bias, embedding and head in `dtype` (ConvertWeight); per layer,
// Mxfp4Experts views of the blocks and scales, which ModelWeights::storage
// keeps mapped. With dtype kBF16 and those matrices stored in bf16 (as
// published), embedding, head, q and o are views of the mapping too
// (ModelWeights::matrices_mapped). Internal when a conversion fails.
absl::StatusOr<ModelWeights> LoadGptOssWeights(const std::string& dir, const ModelConfig& config,
                                               WeightsDtype dtype);

}  // namespace pdserve
