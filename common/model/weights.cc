#include "common/model/weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace pdserve {

int64_t Mxfp4ExpertBytes(const ModelConfig& c) {
  if (c.family != ModelFamily::kGptOss) return 0;
  const int64_t D = c.d_model, F = c.expert_hidden;
  // Per expert: gate|up [2F, D] and down [D, F] at 17 bytes per 32 weights
  // (16 of codes, 1 scale); their biases are NamedTensors.
  return c.n_layers * c.n_experts * (2 * F * D + D * F) / 32 * 17;
}

std::vector<NamedTensor> NamedTensors(ModelWeights* w) {
  const ModelConfig& c = w->config;
  const int64_t V = c.vocab_size, D = c.d_model, H = c.n_heads, K = c.n_kv_heads, d = c.head_dim,
                E = c.n_experts, F = c.expert_hidden;
  std::vector<NamedTensor> out;
  out.push_back({"embed.weight", {V, D}, &w->embed, true});
  w->layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w->layers[l];
    const std::string p = absl::StrCat("blocks.", l, ".");
    out.push_back({p + "norm1.weight", {D}, &L.norm1, false});
    out.push_back({p + "attn.q_proj.weight", {H * d, D}, &L.q_proj, true});
    out.push_back({p + "attn.kv_proj.weight", {2 * K * d, D}, &L.kv_proj, true});
    out.push_back({p + "attn.o_proj.weight", {D, H * d}, &L.o_proj, true});
    out.push_back({p + "attn.sink_bias", {H}, &L.sink_bias, false});
    out.push_back({p + "norm2.weight", {D}, &L.norm2, false});
    out.push_back({p + "moe.router.weight", {E, D}, &L.router, false});
    if (c.family == ModelFamily::kGptOss) {
      // Its biases; the MXFP4 experts are no at::Tensors (Mxfp4ExpertBytes).
      out.push_back({p + "attn.qkv_bias", {H * d + 2 * K * d}, &L.qkv_bias, false});
      out.push_back({p + "attn.o_bias", {D}, &L.o_bias, false});
      out.push_back({p + "moe.router.bias", {E}, &L.router_bias, false});
      out.push_back({p + "moe.experts.gate_up_bias", {E, 2 * F}, &L.gate_up_bias, false});
      out.push_back({p + "moe.experts.down_bias", {E, D}, &L.down_bias, false});
      continue;
    }
    out.push_back({p + "moe.experts.gate_proj", {E, F, D}, &L.gate_proj, true});
    out.push_back({p + "moe.experts.up_proj", {E, F, D}, &L.up_proj, true});
    out.push_back({p + "moe.experts.down_proj", {E, D, F}, &L.down_proj, true});
    L.shared_gate.resize(c.n_shared_experts);
    L.shared_up.resize(c.n_shared_experts);
    L.shared_down.resize(c.n_shared_experts);
    for (int64_t j = 0; j < c.n_shared_experts; ++j) {
      const std::string s =
          c.n_shared_experts == 1 ? p + "moe.shared." : absl::StrCat(p, "moe.shared.", j, ".");
      out.push_back({s + "gate_proj.weight", {F, D}, &L.shared_gate[j], true});
      out.push_back({s + "up_proj.weight", {F, D}, &L.shared_up[j], true});
      out.push_back({s + "down_proj.weight", {D, F}, &L.shared_down[j], true});
    }
  }
  out.push_back({"norm.weight", {D}, &w->norm, false});
  if (!c.tie_embeddings) out.push_back({"head.weight", {V, D}, &w->head, true});
  return out;
}

ModelWeights RandomWeights(const ModelConfig& config, uint64_t seed) {
  ModelWeights w;
  w.config = config;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (NamedTensor& nt : NamedTensors(&w)) {
    at::Tensor t = at::randn(nt.shape, gen, at::kFloat);
    const bool is_norm = nt.name.find("norm") != std::string::npos;
    if (is_norm) {
      t = 1.0 + 0.1 * t;
    } else if (nt.name.find("sink_bias") != std::string::npos) {
      t = 4.0 * t;  // some heads exceed the clamp range
    } else if (nt.name == "embed.weight" || nt.name == "head.weight") {
      t = 0.05 * t;
    } else {
      t = t / std::sqrt(static_cast<double>(nt.shape.back()));  // 1/sqrt(fan_in)
    }
    *nt.tensor = t.contiguous();
  }
  return w;
}

int64_t WeightBytes(const ModelWeights& w) {
  ModelWeights& mw = const_cast<ModelWeights&>(w);
  int64_t bytes = 0;
  for (const NamedTensor& nt : NamedTensors(&mw)) {
    if (nt.tensor->defined()) bytes += nt.tensor->numel() * nt.tensor->element_size();
  }
  return bytes + Mxfp4ExpertBytes(w.config);
}

}  // namespace pdserve
