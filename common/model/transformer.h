// Transformer: the GPT-OSS-Lite forward pass (docs/model.md, "Forward pass")
// over one or more sequences at once. Every op is an ATen op, so the same
// code trains under autograd when the weights require grad.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "common/model/checkpoint.h"
#include "common/model/rope.h"
#include "common/model/weights.h"

namespace pdserve {

class MixedKVCache;
class PackedF32Weights;  // gemm_dnnl.h
class KMajorPacks;       // kmajor_packs.h
class HugePageArena;     // huge_page_arena.h

// A run of consecutive tokens of one sequence inside a forward's rows.
struct Segment {
  MixedKVCache* cache = nullptr;  // nullptr: attend only within the segment
  int64_t start_pos = 0;          // absolute position of the first token
  int64_t length = 0;
};

struct ForwardOptions {
  // Logits for every row, or only for each segment's last row.
  bool all_logits = false;
  // Clamped sinks per layer ([H] each), computed once per generation by
  // ClampedSinks(); when null they are computed here.
  const std::vector<at::Tensor>* sinks = nullptr;
  // Called once per layer right after its K/V were appended to the caches
  // (the layer-by-layer hand-off sends from here). A non-OK status stops
  // the forward and is returned.
  std::function<absl::Status(int64_t layer)> after_layer;
};

// Whether a Transformer packs its layer weights of this dtype for the
// prefill GEMMs (gemm_dnnl.h): with PackF32Weights(), fp32 weights, and
// bf16 ones on the widening path (--bf16-matmul widen; the other bf16 paths
// read bf16 as it is). Never int8.
bool PacksLayerWeights(WeightsDtype dtype);

class Transformer {
 public:
  // For inference (weights without requires_grad) it fuses q|kv and gate|up
  // and puts the weights decode streams on 2 MiB pages (huge_page_arena.h);
  // with PackF32Weights() it also packs, for the prefill GEMMs, each layer
  // matmul weight whose dtype PacksLayerWeights().
  explicit Transformer(ModelWeights weights);

  const ModelConfig& config() const { return w_.config; }
  const ModelWeights& weights() const { return w_; }
  const Rope& rope() const { return rope_; }
  // The prefill GEMMs' packed fp32 weights; null when not packing.
  const PackedF32Weights* packed_f32() const { return packed_.get(); }
  const KMajorPacks* kmajor_packs() const { return kmajor_.get(); }  // null unless --bf16-matmul kmajor or dot
  // ModelFingerprint of the weights as loaded (hashed at load where the
  // k-major packs replace the row-major matrices, else on each call).
  std::string Fingerprint() const;

  // ids: [N] int64, the concatenation of `segments` (lengths sum to N).
  // Segments with a cache attend to its rows and append their new K/V.
  // Returns logits [rows, V] fp32. Errors: InvalidArgument for inconsistent
  // segments, ResourceExhausted from the cache cap; LibTorch exceptions are
  // caught and returned as Internal.
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& ids, const std::vector<Segment>& segments,
                                     const ForwardOptions& options = {}) const;

  // The per-generation sink clamp cache: clamp(sink_bias, lo, hi) per layer.
  std::vector<at::Tensor> ClampedSinks() const;

 private:
  absl::StatusOr<at::Tensor> ForwardImpl(const at::Tensor& ids, const std::vector<Segment>& segments,
                                         const ForwardOptions& options) const;
  at::Tensor Moe(int64_t layer, const at::Tensor& h) const;
  void PackLayerWeights();
  // Under --bf16-matmul kmajor or dot (bf16 matrices) or where Q8PacksKMajor()
  // (int8 ones): the k-major packs, taking the place of the row-major matrices
  // unless KMajorKeepsRowMajor() (kmajor_packs.h); nothing otherwise.
  void PackKMajor();
  // Layer l's q, kv, gate, up and shared gate/up as views of its fused tensors.
  void BindFusedViews(size_t l);
  // Rows `ids` of the embedding in fp32 (from its k-major pack where that
  // is the only copy).
  at::Tensor Embed(const at::Tensor& ids) const;
  // Attention of a forward's rows, segment by segment (prefill chunks, the
  // no-cache path): appends to each segment's cache as the masks require.
  // Returns [N, H*d]; ResourceExhausted from a cache at its cap.
  absl::StatusOr<at::Tensor> SegmentAttention(int64_t layer, const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const std::vector<Segment>& segments,
                                              const at::Tensor& sinks) const;
  // Attention of a decode step (every segment one token with a cache):
  // appends each row's K/V, then the fused kernel over all sequences.
  // Returns [N, H*d]; ResourceExhausted from a cache at its cap.
  absl::StatusOr<at::Tensor> DecodeStepAttention(int64_t layer, const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, const std::vector<Segment>& segments,
                                                 const at::Tensor& sinks) const;
  // An expert or shared MLP: fused gate|up when available.
  at::Tensor ExpertMlp(int64_t layer, int64_t expert, const at::Tensor& x) const;
  at::Tensor SharedMlp(int64_t layer, int64_t j, const at::Tensor& x) const;
  // Moe's output for a decode-sized batch h [N, D] in fp32 through the
  // decode kernels, with the same bits as its general path: every shared
  // and routed expert's gate|up (top_k ids per row in `idx`, weights in
  // `gates`) in one parallel region, their down projections and the
  // weighted sums in another. Undefined where a weight is not usable by the
  // kernels (gemv_matrix.h: a strided view; Q8_0 without AVX2+FMA+F16C).
  // In transformer_moe.cc, with the rest of the MoE.
  at::Tensor MoeRows(int64_t layer, const at::Tensor& h, const int64_t* idx, const float* gates) const;

  // Inference layout: q|kv and gate|up stored side by side so that each is
  // one matmul (one pass over x, one parallel region). The LayerWeights
  // tensors become views into these, so memory does not grow. Empty when
  // the weights require grad (training keeps the checkpoint's tensors).
  struct Fused {
    at::Tensor qkv;                   // [H*d + 2*K*d, D]
    at::Tensor gate_up;               // [E, 2F, D]
    std::vector<at::Tensor> shared;   // n_shared x [2F, D]
  };

  ModelWeights w_;
  Rope rope_;
  std::vector<Fused> fused_;
  // The packs Forward puts in scope (LinearF32); null when not packing.
  std::shared_ptr<const PackedF32Weights> packed_;
  // The k-major packs Forward puts in scope; null when not packing.
  std::shared_ptr<const KMajorPacks> kmajor_;
  std::string fingerprint_;  // set where the packs took the matrices
};

// x / sqrt(mean(x^2) + eps) * w, in fp32. Without autograd, 2-D fp32 x and
// w run one row-local pass per row (the sum of squares in double), so a
// row does not depend on its batch.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w, double eps);

// x W^T in fp32 (bf16 weights are widened exactly; int8 weights go to
// LinearQ8, linear_int8.h). Up to 32 rows of x use the bandwidth-bound
// kernels of gemv_kernels.h; more rows use LinearF32 (gemm_dnnl.h), or for bf16 weights
// the path SetBf16Matmul chose (bf16_matmul.h). Under --bf16-matmul dot
// every bf16-weight product, whatever M, is LinearBf16Dot (x rounded to bf16).
at::Tensor Linear(const at::Tensor& x, const at::Tensor& w);

// Linear through the row kernels for any number of rows, where they can
// run (fp32 or bf16 weights, no autograd): a row's result does not depend
// on how many rows share the call. For small matrices whose cost does not
// matter and whose bits do: the MoE router, so that a prompt routes its
// tokens alike in a batched prefill and alone.
at::Tensor LinearRowwise(const at::Tensor& x, const at::Tensor& w);

}  // namespace pdserve
