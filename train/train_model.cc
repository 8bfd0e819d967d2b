#include "train/train_model.h"

#include <ATen/ATen.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "common/model/attention.h"
#include "common/model/transformer.h"

namespace pdserve {
namespace {

bool IsResidualOutput(const std::string& name) {
  return name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
}

}  // namespace

bool CpuHasFastBf16Matmul() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) return line.find(" amx_bf16") != std::string::npos;
  }
  return false;
}

at::Tensor TrainModel::Lin(const at::Tensor& x, const at::Tensor& w) const {
  if (!bf16_) return at::linear(x, w);
  return at::linear(x.to(at::kBFloat16), w.to(at::kBFloat16)).to(at::kFloat);
}

at::Tensor TrainModel::Matmul(const at::Tensor& a, const at::Tensor& b) const {
  if (!bf16_) return at::matmul(a, b);
  return at::matmul(a.to(at::kBFloat16), b.to(at::kBFloat16)).to(at::kFloat);
}

at::Tensor TrainModel::Mlp(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up,
                           const at::Tensor& down) const {
  return Lin(at::silu(Lin(x, gate)) * Lin(x, up), down);
}

TrainModel::TrainModel(ModelWeights weights, bool bf16_matmuls)
    : w_(std::move(weights)), rope_(w_.config), bf16_(bf16_matmuls) {
  for (NamedTensor& nt : NamedTensors(&w_)) {
    *nt.tensor = nt.tensor->detach().to(at::kFloat).contiguous().set_requires_grad(true);
  }
}

ModelWeights TrainModel::InitWeights(const ModelConfig& config, uint64_t seed) {
  ModelWeights w;
  w.config = config;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double residual_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config.n_layers));
  for (NamedTensor& nt : NamedTensors(&w)) {
    at::Tensor t;
    if (nt.name.find("norm") != std::string::npos) {
      t = at::ones(nt.shape, at::kFloat);
    } else if (nt.name.find("sink_bias") != std::string::npos) {
      t = at::zeros(nt.shape, at::kFloat);
    } else if (nt.name == "embed.weight" || nt.name == "head.weight") {
      t = 0.02 * at::randn(nt.shape, gen, at::kFloat);
    } else {
      t = at::randn(nt.shape, gen, at::kFloat) / std::sqrt(static_cast<double>(nt.shape.back()));
      if (IsResidualOutput(nt.name)) t = t * residual_scale;
    }
    *nt.tensor = t.contiguous();
  }
  return w;
}

std::vector<TrainParam> TrainModel::Parameters() {
  std::vector<TrainParam> out;
  for (NamedTensor& nt : NamedTensors(&w_)) {
    const bool decay = nt.is_matmul_weight && nt.name.find("router") == std::string::npos;
    out.push_back({nt.name, *nt.tensor, decay});
  }
  return out;
}

namespace {

// softmax([scores, sink]) @ [v; 0]: the sink column meets a zero value row,
// so the probabilities never need slicing. s [..., T, S], vh [..., S, d].
template <typename MatmulFn>
at::Tensor SoftmaxWithSink(const at::Tensor& s, const at::Tensor& z, const at::Tensor& vh, const MatmulFn& matmul) {
  std::vector<int64_t> zshape = s.sizes().vec();
  zshape.back() = 1;
  const at::Tensor p = at::softmax(at::cat({s, z.expand(zshape)}, -1), -1);
  std::vector<int64_t> pad = vh.sizes().vec();
  pad[pad.size() - 2] = 1;
  return matmul(p, at::cat({vh, at::zeros(pad, vh.options())}, -2));
}

}  // namespace

at::Tensor TrainModel::Attention(int64_t l, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const {
  const ModelConfig& c = w_.config;
  const int64_t B = q.size(0), T = q.size(1), H = c.n_heads, d = c.head_dim, W = c.window;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto matmul = [this](const at::Tensor& a, const at::Tensor& b) { return Matmul(a, b); };
  // [B, H, T, d]; query head h reads KV head h / n_rep.
  const at::Tensor qh = (q * scale).permute({0, 2, 1, 3});
  const at::Tensor kh = k.repeat_interleave(c.n_rep(), 2).permute({0, 2, 1, 3});
  const at::Tensor vh = v.repeat_interleave(c.n_rep(), 2).permute({0, 2, 1, 3});
  // The sink: one more logit per query that takes mass and has no value.
  const at::Tensor z = at::clamp(w_.layers[l].sink_bias, c.sink_clamp_lo, c.sink_clamp_hi).view({1, H, 1, 1, 1});
  const constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (!ModelConfig::IsWindowed(l) || T <= 2 * W) {
    const at::Tensor mask = AttentionMask(0, T, 0, T, ModelConfig::IsWindowed(l) ? W : 0);
    at::Tensor s = Matmul(qh, kh.transpose(-1, -2));
    if (mask.defined()) s = s + at::zeros(mask.sizes(), at::kFloat).masked_fill(mask.logical_not(), kNegInf);
    return SoftmaxWithSink(s, z.squeeze(-1), vh, matmul).permute({0, 2, 1, 3}).reshape({B, T, H * d});
  }
  // Windowed: query block b (positions bW..bW+W-1) sees key blocks b-1 and
  // b, so a step costs T x 2W instead of T x T.
  const int64_t nb = (T + W - 1) / W, Tp = nb * W;
  auto blocks = [&](const at::Tensor& x) {  // [B, H, T, d] -> [B, H, nb, 2W, d]
    const at::Tensor xp = at::constant_pad_nd(x, {0, 0, W, Tp - T});  // W rows before, to Tp after
    return at::cat({xp.narrow(2, 0, Tp).view({B, H, nb, W, d}), xp.narrow(2, W, Tp).view({B, H, nb, W, d})}, 3);
  };
  const at::Tensor qb = at::constant_pad_nd(qh, {0, 0, 0, Tp - T}).view({B, H, nb, W, d});
  at::Tensor s = Matmul(qb, blocks(kh).transpose(-1, -2));  // [B, H, nb, W, 2W]
  // Query i of block b sits at bW+i, key j at (b-1)W+j.
  const at::Tensor qpos = at::arange(nb, at::kLong).view({nb, 1, 1}) * W + at::arange(W, at::kLong).view({1, W, 1});
  const at::Tensor kpos = at::arange(nb, at::kLong).view({nb, 1, 1}) * W - W + at::arange(2 * W, at::kLong).view({1, 1, 2 * W});
  const at::Tensor allowed = kpos.le(qpos) & (qpos - kpos).lt(W) & kpos.ge(0);
  s = s + at::zeros(allowed.sizes(), at::kFloat).masked_fill(allowed.logical_not(), kNegInf);
  const at::Tensor o = SoftmaxWithSink(s, z, blocks(vh), matmul);  // [B, H, nb, W, d]
  return o.view({B, H, Tp, d}).narrow(2, 0, T).permute({0, 2, 1, 3}).reshape({B, T, H * d});
}

at::Tensor TrainModel::Moe(int64_t l, const at::Tensor& h, at::Tensor* aux) const {
  const ModelConfig& c = w_.config;
  const LayerWeights& L = w_.layers[l];
  const int64_t N = h.size(0), E = c.n_experts;
  const at::Tensor logits = at::linear(h, L.router);  // [N, E], fp32: routing stays exact
  auto [top_logits, top_idx] = at::topk(logits, c.top_k, /*dim=*/1);
  const at::Tensor gates = at::softmax(top_logits, 1);  // [N, top_k]

  at::Tensor out = at::zeros_like(h);
  for (size_t j = 0; j < L.shared_gate.size(); ++j) out = out + Mlp(h, L.shared_gate[j], L.shared_up[j], L.shared_down[j]);
  at::Tensor load = at::zeros({E}, at::kFloat);  // fraction of routed slots per expert
  for (int64_t e = 0; e < E; ++e) {
    const at::Tensor chosen = top_idx.eq(e);  // [N, top_k]
    const at::Tensor rows = chosen.any(1).nonzero().squeeze(1);
    if (rows.numel() == 0) continue;
    load[e] = static_cast<double>(rows.numel()) / static_cast<double>(N * c.top_k);
    const at::Tensor w = (gates * chosen.to(at::kFloat)).sum(1).index_select(0, rows).unsqueeze(1);
    const at::Tensor y = Mlp(h.index_select(0, rows), L.gate_proj.select(0, e), L.up_proj.select(0, e),
                             L.down_proj.select(0, e));
    out = out.index_add(0, rows, w * y);
  }
  // Switch-style balance: E * sum_e (share of slots) * (mean router probability).
  const at::Tensor importance = at::softmax(logits, 1).mean(0);
  const at::Tensor layer_aux = static_cast<double>(E) * (load * importance).sum();
  *aux = aux->defined() ? *aux + layer_aux : layer_aux;
  return out;
}

TrainModel::Output TrainModel::Forward(const at::Tensor& ids) const {
  const ModelConfig& c = w_.config;
  TORCH_CHECK(ids.dim() == 2, "ids must be [B, T], got ", ids.sizes());
  const int64_t B = ids.size(0), T = ids.size(1), D = c.d_model, H = c.n_heads, K = c.n_kv_heads, d = c.head_dim;
  TORCH_CHECK(T <= c.max_context, "sequence length ", T, " exceeds max_context ", c.max_context);
  at::Tensor cos[2], sin[2];
  for (int g = 0; g < 2; ++g) rope_.Table(0, T, g == 1, &cos[g], &sin[g]);

  at::Tensor x = w_.embed.index_select(0, ids.reshape({-1})).view({B, T, D});
  at::Tensor aux;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    const int g = ModelConfig::IsWindowed(l) ? 0 : 1;
    const at::Tensor h = RmsNorm(x, L.norm1, c.norm_eps);
    const at::Tensor q = Rope::Apply(Lin(h, L.q_proj).view({B, T, H, d}), cos[g], sin[g]);
    const at::Tensor kv = Lin(h, L.kv_proj);
    const at::Tensor k = Rope::Apply(kv.narrow(-1, 0, K * d).reshape({B, T, K, d}), cos[g], sin[g]);
    const at::Tensor v = kv.narrow(-1, K * d, K * d).reshape({B, T, K, d});
    x = x + Lin(Attention(l, q, k, v), L.o_proj);
    x = x + Moe(l, RmsNorm(x, L.norm2, c.norm_eps).reshape({B * T, D}), &aux).view({B, T, D});
  }
  const at::Tensor& head = c.tie_embeddings ? w_.embed : w_.head;
  return {Lin(RmsNorm(x, w_.norm, c.norm_eps), head), aux / static_cast<double>(c.n_layers)};
}

}  // namespace pdserve
