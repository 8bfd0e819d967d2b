// TrainModel: the GPT-OSS-Lite forward of docs/model.md over a batch of
// equal-length sequences [B, T] at positions 0..T-1, built from
// differentiable ATen ops, for training. The serving `Transformer` (segments,
// KV caches, fused kernels) is not used here; tests/train_model_test.cc holds
// the two equal within 1e-4 on windowed and global layers past the window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/model/rope.h"
#include "common/model/weights.h"

namespace pdserve {

// One trainable tensor and what the optimizer should do with it.
struct TrainParam {
  std::string name;  // the checkpoint name (docs/model.md)
  at::Tensor tensor; // fp32, requires grad
  bool decay;        // weight decay applies (matmul weights only)
};

class TrainModel {
 public:
  // Takes `weights` as they are, widened to fp32, every tensor requiring
  // grad. With `bf16_matmuls` every matmul multiplies bf16 copies of its
  // operands (fp32 accumulation, fp32 results and fp32 master weights):
  // 15x faster through oneDNN on CPUs with AMX, far slower without.
  explicit TrainModel(ModelWeights weights, bool bf16_matmuls = false);

  // Fresh weights for training, drawn from `seed`: N(0, 1/fan_in) matmul
  // weights with the residual outputs (o_proj, down) scaled by
  // 1/sqrt(2 n_layers), N(0, 0.02^2) embeddings, unit norms, zero sinks.
  static ModelWeights InitWeights(const ModelConfig& config, uint64_t seed);

  struct Output {
    at::Tensor logits;    // [B, T, V] fp32
    at::Tensor aux_loss;  // scalar: the routers' load-balancing loss, mean over layers
  };
  // ids: [B, T] int64 (every row starts at position 0). Throws c10::Error
  // on bad shapes or ids (the trainer catches at its edge).
  Output Forward(const at::Tensor& ids) const;

  const ModelConfig& config() const { return w_.config; }
  // The live tensors (share storage with the parameters).
  const ModelWeights& weights() const { return w_; }
  std::vector<TrainParam> Parameters();

 private:
  at::Tensor Lin(const at::Tensor& x, const at::Tensor& w) const;
  at::Tensor Matmul(const at::Tensor& a, const at::Tensor& b) const;
  at::Tensor Mlp(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) const;
  at::Tensor Attention(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const;
  // h: [N, D]. Adds this layer's load-balancing loss to *aux.
  at::Tensor Moe(int64_t layer, const at::Tensor& h, at::Tensor* aux) const;

  ModelWeights w_;
  Rope rope_;
  bool bf16_;
};

// True when this CPU multiplies bf16 in hardware (AMX or AVX512-BF16), where
// TrainModel's bf16 matmuls pay off.
bool CpuHasFastBf16Matmul();

}  // namespace pdserve
