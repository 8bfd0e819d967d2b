// ModelWeights: the tensors of one GPT-OSS-Lite model, named and shaped as
// docs/model.md's checkpoint table. The single place that knows those names.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/model/config.h"

namespace pdserve {

struct Mxfp4Experts;  // moe_mxfp4.h

struct LayerWeights {
  at::Tensor norm1;        // [D] fp32
  at::Tensor q_proj;       // [H*d, D]
  at::Tensor kv_proj;      // [2*K*d, D]; rows 0..K*d-1 are K
  at::Tensor o_proj;       // [D, H*d]
  at::Tensor sink_bias;    // [H] fp32
  at::Tensor norm2;        // [D] fp32
  at::Tensor router;       // [E, D] fp32 (routing decisions stay exact)
  at::Tensor gate_proj;    // [E, F, D]
  at::Tensor up_proj;      // [E, F, D]
  at::Tensor down_proj;    // [E, D, F]
  std::vector<at::Tensor> shared_gate;  // n_shared x [F, D]
  std::vector<at::Tensor> shared_up;    // n_shared x [F, D]
  std::vector<at::Tensor> shared_down;  // n_shared x [D, F]
  // gpt-oss (ModelFamily::kGptOss) only, undefined otherwise; gate_proj,
  // up_proj and down_proj are then undefined and the experts are `mxfp4`.
  at::Tensor qkv_bias;     // [H*d + 2*K*d] fp32: q's, then k's, then v's
  at::Tensor o_bias;       // [D] fp32
  at::Tensor router_bias;  // [E] fp32
  at::Tensor gate_up_bias;  // [E, 2F] fp32, rows interleaved as the weights
  at::Tensor down_bias;     // [E, D] fp32
  std::shared_ptr<const Mxfp4Experts> mxfp4;  // views into ModelWeights::storage and the biases above
};

struct ModelWeights {
  ModelConfig config;
  at::Tensor embed;  // [V, D]
  std::vector<LayerWeights> layers;
  at::Tensor norm;   // [D] fp32
  at::Tensor head;   // [V, D]; undefined when tie_embeddings
  // What the layers' views point into (gpt-oss: the mapped shards); null
  // when every tensor owns its memory.
  std::shared_ptr<const void> storage;
  // embed, head and every layer's q_proj and o_proj are read-only views of
  // `storage` (gpt-oss stored in bf16, loaded with --weights-dtype bf16):
  // the Transformer neither fuses, moves nor packs them, so processes that
  // map the same files share their pages.
  bool matrices_mapped = false;
};

// One named tensor slot of the checkpoint table.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  at::Tensor* tensor;  // where it lives in ModelWeights
  bool is_matmul_weight;  // may be stored in bf16 for compute
};

// Every tensor docs/model.md names for `w.config`, in checkpoint order, with
// pointers into `w` (resizes w.layers / shared vectors as needed). For a
// gpt-oss config: its dense tensors (k|v fused, q|k|v biases fused, in
// pdserve's names); the MXFP4 experts are not at::Tensors (Mxfp4ExpertBytes).
std::vector<NamedTensor> NamedTensors(ModelWeights* w);

// Random weights drawn from `seed` (deterministic on one machine). Scales keep
// activations O(1) so that small random models give non-degenerate tokens.
ModelWeights RandomWeights(const ModelConfig& config, uint64_t seed);

// Bytes of all tensors in `w` as held in memory, the MXFP4 experts included.
int64_t WeightBytes(const ModelWeights& w);

// Bytes of a gpt-oss config's MXFP4 experts (blocks and scales as stored,
// mapped rather than copied; their biases are NamedTensors); 0 for other
// configs.
int64_t Mxfp4ExpertBytes(const ModelConfig& config);

}  // namespace pdserve
