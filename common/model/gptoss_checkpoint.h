// The tensors of a Hugging Face gpt-oss checkpoint (docs/model.md, "gpt-oss
// checkpoints"), checked against its config before anything is built from
// them: every name the published layout has, with its shape and dtype, and
// the MXFP4 experts' e8m0 scales within the range the kernels take. No
// LibTorch here: the views point into the read-only mapped shards.
//
//   GptOssTensorSpec, GptOssTensorSpecs   what the config says the file holds
//   GptOssCheckpoint::Open                the shards, checked against them
// (gptoss_weights.h builds the model's weights from them.)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/model/sharded_safetensors.h"

namespace pdserve {

// e8m0 scale bytes the loader takes: 2^(s - 127) up to 2^32 (a block of
// FP4 values up to 6 * 2^32). 255 is NaN in the OCP MX spec; a larger
// scale than kMaxE8m0 is no trained weight: both are refused as corrupt.
inline constexpr uint8_t kMaxE8m0 = 127 + 32;

struct GptOssTensorSpec {
  enum class Kind {
    kFloat,  // F32 or BF16 (norms, sinks and biases may be either)
    kU8,     // MXFP4 blocks or e8m0 scales
  };
  std::string name;
  std::vector<int64_t> shape;
  Kind kind = Kind::kFloat;
  bool e8m0_scales = false;  // its bytes are scales: checked against kMaxE8m0
};

// Every tensor a gpt-oss checkpoint of `config` holds, in the published
// names (model.layers.L.self_attn.q_proj.weight, ...). InvalidArgument when
// the config is not a kGptOss one with MXFP4 experts, or when its widths
// are not multiples of the MXFP4 block (32).
absl::StatusOr<std::vector<GptOssTensorSpec>> GptOssTensorSpecs(const ModelConfig& config);

class GptOssCheckpoint {
 public:
  // Maps `dir`'s shards (ShardedSafetensors::Open, with its errors) and
  // checks every spec: DataLoss naming the tensor and the file when one is
  // missing or has another shape or dtype, or when a scale byte is above
  // kMaxE8m0 (naming its position and value). Tensors the specs do not name
  // are ignored.
  static absl::StatusOr<std::unique_ptr<GptOssCheckpoint>> Open(const std::string& dir, const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  // The checked view of a spec's tensor; nullptr for a name no spec has.
  const StTensorView* Find(const std::string& name) const;
  // How many tensors were checked (every spec's).
  size_t num_tensors() const { return specs_.size(); }

 private:
  GptOssCheckpoint() = default;
  ModelConfig config_;
  std::unique_ptr<ShardedSafetensors> shards_;
  std::vector<GptOssTensorSpec> specs_;
};

}  // namespace pdserve
