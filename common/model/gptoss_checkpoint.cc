#include "common/model/gptoss_checkpoint.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

using Kind = GptOssTensorSpec::Kind;

constexpr int64_t kMxfp4Block = 32;  // values per e8m0 scale
constexpr int64_t kMxfp4BlockBytes = 16;

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

void AddLayer(const ModelConfig& c, int64_t l, std::vector<GptOssTensorSpec>* out) {
  const int64_t D = c.d_model, Hd = c.n_heads * c.head_dim, Kd = c.n_kv_heads * c.head_dim;
  const int64_t E = c.n_experts, F = c.expert_hidden;
  const std::string p = absl::StrCat("model.layers.", l, ".");
  auto add = [&](const std::string& name, std::vector<int64_t> shape, Kind kind = Kind::kFloat,
                 bool scales = false) { out->push_back({p + name, std::move(shape), kind, scales}); };
  add("input_layernorm.weight", {D});
  add("post_attention_layernorm.weight", {D});
  add("self_attn.q_proj.weight", {Hd, D});
  add("self_attn.q_proj.bias", {Hd});
  add("self_attn.k_proj.weight", {Kd, D});
  add("self_attn.k_proj.bias", {Kd});
  add("self_attn.v_proj.weight", {Kd, D});
  add("self_attn.v_proj.bias", {Kd});
  add("self_attn.o_proj.weight", {D, Hd});
  add("self_attn.o_proj.bias", {D});
  add("self_attn.sinks", {c.n_heads});
  add("mlp.router.weight", {E, D});
  add("mlp.router.bias", {E});
  // gate and up interleaved by rows (2j gate, 2j + 1 up), [out, in] blocks.
  add("mlp.experts.gate_up_proj_blocks", {E, 2 * F, D / kMxfp4Block, kMxfp4BlockBytes}, Kind::kU8);
  add("mlp.experts.gate_up_proj_scales", {E, 2 * F, D / kMxfp4Block}, Kind::kU8, true);
  add("mlp.experts.gate_up_proj_bias", {E, 2 * F});
  add("mlp.experts.down_proj_blocks", {E, D, F / kMxfp4Block, kMxfp4BlockBytes}, Kind::kU8);
  add("mlp.experts.down_proj_scales", {E, D, F / kMxfp4Block}, Kind::kU8, true);
  add("mlp.experts.down_proj_bias", {E, D});
}

absl::Status CheckTensor(const ShardedSafetensors& shards, const GptOssTensorSpec& spec) {
  const StTensorView* v = shards.Find(spec.name);
  if (v == nullptr) {
    return absl::DataLossError(absl::StrCat("gpt-oss checkpoint lacks tensor '", spec.name, "' ",
                                            Shape(spec.shape), " (model.safetensors.index.json)"));
  }
  const bool dtype_ok = spec.kind == Kind::kU8 ? v->dtype == StDtype::kU8
                                                : (v->dtype == StDtype::kF32 || v->dtype == StDtype::kBF16);
  if (!dtype_ok || v->shape != spec.shape) {
    return absl::DataLossError(absl::StrCat("tensor '", spec.name, "' in '", shards.FileOf(spec.name), "' is ",
                                            v->dtype_name, " ", Shape(v->shape), "; the config says ",
                                            spec.kind == Kind::kU8 ? "U8" : "BF16 or F32", " ", Shape(spec.shape)));
  }
  if (!spec.e8m0_scales) return absl::OkStatus();
  const uint8_t* begin = v->data;
  const uint8_t* bad = std::find_if(begin, begin + v->nbytes, [](uint8_t s) { return s > kMaxE8m0; });
  if (bad == begin + v->nbytes) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("tensor '", spec.name, "' in '", shards.FileOf(spec.name),
                                          "' has e8m0 scale byte ", static_cast<int>(*bad), " at element ",
                                          bad - begin, *bad == 255 ? " (NaN)" : "", ": scales above ",
                                          static_cast<int>(kMaxE8m0), " (2^32) are no trained weights"));
}

}  // namespace

absl::StatusOr<std::vector<GptOssTensorSpec>> GptOssTensorSpecs(const ModelConfig& c) {
  if (c.family != ModelFamily::kGptOss) {
    return absl::InvalidArgumentError("GptOssTensorSpecs takes a gpt-oss config (hf_config.h)");
  }
  if (c.expert_format != ExpertFormat::kMxfp4) {
    return absl::InvalidArgumentError(
        "gpt-oss checkpoints with dense (bf16) experts are not implemented: quantization_config mxfp4 only");
  }
  if (c.d_model % kMxfp4Block != 0 || c.expert_hidden % kMxfp4Block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MXFP4 experts need hidden_size (", c.d_model,
                                                   ") and intermediate_size (", c.expert_hidden,
                                                   ") to be multiples of ", kMxfp4Block));
  }
  std::vector<GptOssTensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, c.d_model}});
  for (int64_t l = 0; l < c.n_layers; ++l) AddLayer(c, l, &specs);
  specs.push_back({"model.norm.weight", {c.d_model}});
  specs.push_back({"lm_head.weight", {c.vocab_size, c.d_model}});
  return specs;
}

absl::StatusOr<std::unique_ptr<GptOssCheckpoint>> GptOssCheckpoint::Open(const std::string& dir,
                                                                         const ModelConfig& config) {
  std::unique_ptr<GptOssCheckpoint> ckpt(new GptOssCheckpoint());
  ckpt->config_ = config;
  ASSIGN_OR_RETURN(ckpt->specs_, GptOssTensorSpecs(config));
  ASSIGN_OR_RETURN(ckpt->shards_, ShardedSafetensors::Open(dir));
  for (const GptOssTensorSpec& spec : ckpt->specs_) RETURN_IF_ERROR(CheckTensor(*ckpt->shards_, spec));
  return ckpt;
}

const StTensorView* GptOssCheckpoint::Find(const std::string& name) const {
  const bool known =
      std::any_of(specs_.begin(), specs_.end(), [&](const GptOssTensorSpec& s) { return s.name == name; });
  return known ? shards_->Find(name) : nullptr;
}

}  // namespace pdserve
