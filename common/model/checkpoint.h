// Checkpoint directories: `config.json` + `model.safetensors` (docs/model.md,
// "Checkpoint"). Loading validates every tensor's name, shape and dtype
// before converting anything.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/model/safetensors.h"
#include "common/model/weights.h"

namespace pdserve {

enum class WeightsDtype {
  kF32,   // every tensor fp32: the reference numbers
  kBF16,  // matmul weights bf16 (oneDNN/AMX), norms, sinks and router fp32
  kInt8,  // matmul weights (embedding and head included) Q8_0, linear_int8.h:
          // blocks of 32 int8 along K with an fp16 scale; norms, sinks and
          // router fp32. A weight whose K is not a multiple of 32 stays fp32.
};

// One checkpoint tensor as held for `dtype` (`matmul`: NamedTensor's
// is_matmul_weight). LoadCheckpoint applies it to every tensor.
at::Tensor ConvertWeight(const at::Tensor& t, bool matmul, WeightsDtype dtype);

// ConvertWeight over every tensor of `w` (random weights in tools/benches).
void ConvertWeights(ModelWeights* w, WeightsDtype dtype);

struct LoadOptions {
  WeightsDtype weights_dtype = WeightsDtype::kF32;
  // When set, the file's config.json must describe the same architecture.
  const ModelConfig* expected_config = nullptr;
};

// Loads DIR/config.json and DIR/model.safetensors. Errors:
// - NotFound: the directory, config or safetensors file is missing;
// - InvalidArgument: a bad config field, or a config that differs from
//   `expected_config` (naming the field);
// - DataLoss: a truncated/corrupt file, or a tensor that is missing,
//   misshapen or of an unsupported dtype, naming the tensor and the expected
//   versus the found value.
absl::StatusOr<ModelWeights> LoadCheckpoint(const std::string& dir, const LoadOptions& options = {});

// Checks a mapped file against `config` without converting anything.
absl::Status ValidateCheckpoint(const SafetensorsFile& file, const ModelConfig& config);

// Writes DIR/config.json and DIR/model.safetensors, creating DIR. Stores
// every tensor as `dtype` (F32, BF16 or F16).
absl::Status SaveCheckpoint(const ModelWeights& weights, const std::string& dir, StDtype dtype);

}  // namespace pdserve
