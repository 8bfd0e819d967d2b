#include "common/model/gptoss_weights.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/gptoss_checkpoint.h"
#include "common/model/moe_mxfp4.h"
#include "common/util/status_macros.h"

namespace pdserve {

namespace {

// Reads the checked tensors of one checkpoint into fp32 (or `dtype`) tensors.
class TensorReader {
 public:
  explicit TensorReader(const GptOssCheckpoint& ckpt) : ckpt_(ckpt) {}

  // A float tensor (F32 or BF16 as stored) copied out of the mapping, as fp32.
  at::Tensor F32(const std::string& name) const {
    const at::Tensor view = Mapped(name);
    return view.scalar_type() == at::kFloat ? view.clone() : view.to(at::kFloat);
  }
  const StTensorView& View(const std::string& name) const { return *ckpt_.Find(name); }  // Open checked every spec's
  bool StoredBf16(const std::string& name) const { return View(name).dtype == StDtype::kBF16; }
  // A float tensor as a view of the read-only mapping (no copy; from_blob
  // does not own it), in its stored dtype.
  at::Tensor Mapped(const std::string& name) const {
    const StTensorView& v = View(name);
    const at::ScalarType t = v.dtype == StDtype::kBF16 ? at::kBFloat16 : at::kFloat;
    return at::from_blob(const_cast<uint8_t*>(v.data), v.shape, at::TensorOptions().dtype(t));
  }

 private:
  const GptOssCheckpoint& ckpt_;
};

// Layer l's experts: views of its blocks and scales, its biases.
std::shared_ptr<const Mxfp4Experts> ExpertViews(const ModelConfig& c, const TensorReader& r, const std::string& p,
                                                LayerWeights& L) {
  const int64_t D = c.d_model, F = c.expert_hidden;
  auto ex = std::make_shared<Mxfp4Experts>();
  ex->d_model = D;
  ex->hidden = F;
  ex->swiglu_limit = c.swiglu_limit;
  const StTensorView& gub = r.View(p + "mlp.experts.gate_up_proj_blocks");
  const StTensorView& gus = r.View(p + "mlp.experts.gate_up_proj_scales");
  const StTensorView& db = r.View(p + "mlp.experts.down_proj_blocks");
  const StTensorView& ds = r.View(p + "mlp.experts.down_proj_scales");
  const float* gu_bias = L.gate_up_bias.data_ptr<float>();
  const float* d_bias = L.down_bias.data_ptr<float>();
  for (int64_t e = 0; e < c.n_experts; ++e) {
    ex->gate_up.push_back({gub.data + e * 2 * F * Mxfp4RowBytes(D), gus.data + e * 2 * F * Mxfp4RowScales(D),
                           gu_bias + e * 2 * F, D});
    ex->down.push_back({db.data + e * D * Mxfp4RowBytes(F), ds.data + e * D * Mxfp4RowScales(F), d_bias + e * D, F});
  }
  return ex;
}

// A matrix in `dtype`: a view of the mapping where `mapped` (bf16 stored,
// bf16 wanted), else converted from fp32.
at::Tensor Matrix(const TensorReader& r, const std::string& name, WeightsDtype dtype, bool mapped) {
  if (mapped) return r.Mapped(name);
  return ConvertWeight(r.F32(name), /*matmul=*/true, dtype);
}

void ReadLayer(const ModelConfig& c, const TensorReader& r, int64_t l, WeightsDtype dtype, bool mapped,
               LayerWeights& L) {
  const std::string p = absl::StrCat("model.layers.", l, ".");
  const auto matmul = [&](const at::Tensor& t) { return ConvertWeight(t, /*matmul=*/true, dtype); };
  L.norm1 = r.F32(p + "input_layernorm.weight");
  L.norm2 = r.F32(p + "post_attention_layernorm.weight");
  L.q_proj = Matrix(r, p + "self_attn.q_proj.weight", dtype, mapped);
  L.kv_proj = matmul(at::cat({r.F32(p + "self_attn.k_proj.weight"), r.F32(p + "self_attn.v_proj.weight")}, 0));
  L.qkv_bias = at::cat({r.F32(p + "self_attn.q_proj.bias"), r.F32(p + "self_attn.k_proj.bias"),
                        r.F32(p + "self_attn.v_proj.bias")});
  L.o_proj = Matrix(r, p + "self_attn.o_proj.weight", dtype, mapped);
  L.o_bias = r.F32(p + "self_attn.o_proj.bias");
  L.sink_bias = r.F32(p + "self_attn.sinks");
  L.router = r.F32(p + "mlp.router.weight");
  L.router_bias = r.F32(p + "mlp.router.bias");
  L.gate_up_bias = r.F32(p + "mlp.experts.gate_up_proj_bias").contiguous();
  L.down_bias = r.F32(p + "mlp.experts.down_proj_bias").contiguous();
  L.mxfp4 = ExpertViews(c, r, p, L);
}

}  // namespace

absl::StatusOr<ModelWeights> LoadGptOssWeights(const std::string& dir, const ModelConfig& config,
                                               WeightsDtype dtype) {
  ASSIGN_OR_RETURN(std::unique_ptr<GptOssCheckpoint> opened, GptOssCheckpoint::Open(dir, config));
  std::shared_ptr<const GptOssCheckpoint> ckpt = std::move(opened);
  const TensorReader r(*ckpt);
  ModelWeights w;
  w.config = config;
  w.storage = ckpt;
  // bf16 wanted and every big matrix stored in bf16 (as published): those
  // stay in the mapping, shared with every process that maps the files.
  bool mapped = dtype == WeightsDtype::kBF16 && r.StoredBf16("model.embed_tokens.weight") &&
                r.StoredBf16("lm_head.weight");
  for (int64_t l = 0; mapped && l < config.n_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
    mapped = r.StoredBf16(p + "q_proj.weight") && r.StoredBf16(p + "o_proj.weight");
  }
  w.matrices_mapped = mapped;
  try {
    w.embed = Matrix(r, "model.embed_tokens.weight", dtype, mapped);
    w.head = Matrix(r, "lm_head.weight", dtype, mapped);
    w.norm = r.F32("model.norm.weight");
    w.layers.resize(config.n_layers);
    for (int64_t l = 0; l < config.n_layers; ++l) ReadLayer(config, r, l, dtype, mapped, w.layers[l]);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("converting gpt-oss checkpoint '", dir.substr(0, 256), "' failed: ", e.what_without_backtrace()));
  }
  return w;
}

}  // namespace pdserve
