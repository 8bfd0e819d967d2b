#include "common/model/transformer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/kv/mixed_kv_cache.h"
#include "common/model/attention.h"
#include "common/kernels/bf16_matmul.h"
#include "common/kernels/decode_attention.h"
#include "common/model/fingerprint.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_matrix.h"
#include "common/kernels/gemv_tiles.h"
#include "common/model/huge_page_arena.h"
#include "common/kernels/kmajor_packs.h"
#include "common/kernels/linear_int8.h"
#include "common/util/status_macros.h"

namespace pdserve {

namespace {

// One row of RmsNorm: y = (x * r) * w with r = 1 / sqrt(mean(x^2) + eps),
// the sum of squares in double. Row-local, so a row's bits do not depend on
// how many rows are normalized together.
void RmsNormRow(const float* x, const float* w, int64_t D, float eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(D)) + eps);
  for (int64_t i = 0; i < D; ++i) y[i] = (x[i] * r) * w[i];
}

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  if (needs_grad || x.dim() != 2 || x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
      w.dim() != 1 || w.size(0) != x.size(1)) {
    return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * w;
  }
  // Inference: one pass per row instead of six ATen ops per call (25 calls
  // per decode step).
  const at::Tensor xc = x.contiguous(), wc = w.contiguous();
  const int64_t N = xc.size(0), D = xc.size(1);
  at::Tensor y = at::empty({N, D}, at::kFloat);
  const float* xp = xc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const auto rows = [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) RmsNormRow(xp + n * D, wp, D, static_cast<float>(eps), yp + n * D);
  };
  at::parallel_for(0, N, /*grain_size=*/64, rows);  // inline up to 64 rows (a decode step)
  return y;
}

namespace {

bool RowKernelsTake(const at::Tensor& x, const GemvMatrix& wm) {
  return x.dim() == 2 && x.scalar_type() == at::kFloat && wm.data != nullptr && GemvAvailable();
}

// x [M, K] W^T through GemvAllRows: each row of x summed in one order for any M.
at::Tensor GemvRowsLinear(const at::Tensor& x, const at::Tensor& w, const GemvMatrix& wm) {
  const at::Tensor xc = x.contiguous();
  const int64_t M = x.size(0), K = w.size(1), N = w.size(0);
  at::Tensor y = at::empty({M, N}, at::kFloat);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool kmajor = wm.packed();  // every row in each call: the kernel blocks them itself
  GemvXBuffer buffer;
  const GemvX gx = PrepareGemvX(wm, xp, M, &buffer);  // rounded once where the kernel takes x rounded
  ForEachGemvTile(
      M, N, K * w.element_size(),
      [&](int64_t m, int64_t rows, int64_t t0, int64_t t1) {
        GemvAllRows(gx.From(m, K), rows, wm, t0, t1, yp + m * N, N);
      },
      kmajor ? std::max<int64_t>(M, 1) : kGemvMaxRows, kmajor ? kKMajorGroup : 1);
  return y;
}

}  // namespace

at::Tensor LinearRowwise(const at::Tensor& x, const at::Tensor& w) {
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  const GemvMatrix wm = AsGemvMatrix(w);
  if (!needs_grad && !IsQ8(w) && RowKernelsTake(x, wm) && x.size(0) > 0) {
    return GemvRowsLinear(x, w, wm);
  }
  return Linear(x, w);
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w) {
  if (IsQ8(w)) return LinearQ8(x, w);
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  const int64_t M = x.dim() == 2 ? x.size(0) : -1;
  const GemvMatrix wm = AsGemvMatrix(w);
  if (!needs_grad && M > 0 && wm.bf16 && GetBf16Matmul() == Bf16Matmul::kDot) {
    // Any M through one kernel, so a row's bits are the same in prefill and
    // decode: the packed one where packs exist, else x rounded once and the
    // row layout's.
    if (wm.kmajor != nullptr && RowKernelsTake(x, wm)) return GemvRowsLinear(x, w, wm);
    return LinearBf16Dot(x, w);
  }
  if (!needs_grad && M > 0 && M <= kGemvMaxBatchRows && RowKernelsTake(x, wm)) {
    // Decode-sized: our kernels stream each weight row once per 4 rows of x
    // (the LM head alone is 196 MB in bf16); gemv_tiles.h.
    return GemvRowsLinear(x, w, wm);
  }
  // Prefill-sized under kmajor: W widened from its pack (maybe the only copy).
  if (!needs_grad && M > 0 && wm.kmajor != nullptr) return LinearBf16KMajorWidened(x, wm.kmajor, wm.rows, wm.cols);
  // bf16 weights: widened exactly, or (opt-in) bf16 activations: bf16 GEMM
  // on AMX, or the dot kernel GemvAllRows uses above.
  if (w.scalar_type() == at::kBFloat16) return LinearBf16(x, w);
  return LinearF32(x, w);
}

Transformer::Transformer(ModelWeights weights) : w_(std::move(weights)), rope_(w_.config) {
  const bool training = std::any_of(w_.layers.begin(), w_.layers.end(),
                                    [](const LayerWeights& L) { return L.q_proj.requires_grad(); });
  if (training) return;
  at::NoGradGuard no_grad;
  if (w_.matrices_mapped) {
    // Read-only views of the checkpoint's mapping (gpt-oss in bf16): used
    // as they are, row-major; fused, moved or packed they would be private
    // copies. Hashed once here (ModelFingerprint reads every byte).
    fingerprint_ = ModelFingerprint(w_);
    return;
  }
  // Fused products, then every weight decode streams on 2 MiB pages.
  HugePageArena arena;
  auto place = [&arena](const at::Tensor& t) { return PlaceOnHugePages(&arena, t); };
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    LayerWeights& L = w_.layers[l];
    Fused f;
    f.qkv = place(at::cat({L.q_proj, L.kv_proj}, 0));
    // gpt-oss: no dense experts (LayerWeights::mxfp4 stays in the mapping).
    if (L.gate_proj.defined()) f.gate_up = place(at::cat({L.gate_proj, L.up_proj}, 1));
    for (size_t j = 0; j < L.shared_gate.size(); ++j) {
      f.shared.push_back(place(at::cat({L.shared_gate[j], L.shared_up[j]}, 0)));
      L.shared_down[j] = place(L.shared_down[j]);
    }
    L.o_proj = place(L.o_proj);
    if (L.down_proj.defined()) L.down_proj = place(L.down_proj);
    fused_.push_back(std::move(f));
    BindFusedViews(l);
  }
  w_.embed = place(w_.embed);
  w_.head = place(w_.head);
  if (PackF32Weights()) PackLayerWeights();
  PackKMajor();
  ReleaseFreedHeap();
}

void Transformer::BindFusedViews(size_t l) {
  const ModelConfig& c = w_.config;
  const int64_t F = c.expert_hidden, q_rows = c.n_heads * c.head_dim;
  LayerWeights& L = w_.layers[l];
  const Fused& f = fused_[l];
  L.q_proj = f.qkv.narrow(0, 0, q_rows);
  L.kv_proj = f.qkv.narrow(0, q_rows, f.qkv.size(0) - q_rows);
  if (f.gate_up.defined()) {
    L.gate_proj = f.gate_up.narrow(1, 0, F);
    L.up_proj = f.gate_up.narrow(1, F, F);
  }
  for (size_t j = 0; j < f.shared.size(); ++j) {
    L.shared_gate[j] = f.shared[j].narrow(0, 0, F);
    L.shared_up[j] = f.shared[j].narrow(0, F, F);
  }
}

bool PacksLayerWeights(WeightsDtype dtype) {
  if (!PackF32Weights()) return false;
  return dtype == WeightsDtype::kF32 || (dtype == WeightsDtype::kBF16 && GetBf16Matmul() == Bf16Matmul::kWiden);
}

void Transformer::PackLayerWeights() {
  auto packs = std::make_shared<PackedF32Weights>();
  // Each weight by its own dtype: an int8 model's few fp32 leftovers (rows
  // too short for Q8 blocks) pack as fp32 weights do.
  const auto add = [&](const at::Tensor& w) {
    const at::ScalarType t = w.scalar_type();
    const WeightsDtype dtype =
        t == at::kFloat ? WeightsDtype::kF32 : t == at::kBFloat16 ? WeightsDtype::kBF16 : WeightsDtype::kInt8;
    if (PacksLayerWeights(dtype)) packs->Add(w);
  };
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const LayerWeights& L = w_.layers[l];
    const Fused& f = fused_[l];
    // The weights prefill's GEMMs read: q|kv, o, every expert's gate|up and
    // down, the shared ones.
    add(f.qkv);
    add(L.o_proj);
    for (int64_t e = 0; f.gate_up.defined() && e < f.gate_up.size(0); ++e) {
      add(f.gate_up.select(0, e));
      add(L.down_proj.select(0, e));
    }
    for (size_t j = 0; j < f.shared.size(); ++j) {
      add(f.shared[j]);
      add(L.shared_down[j]);
    }
  }
  if (packs->count() > 0) packed_ = std::move(packs);
}

void Transformer::PackKMajor() {
  auto packs = std::make_shared<KMajorPacks>();
  // Its own arena: the row-major matrices' chunks are unmapped once taken.
  // Every matrix decode reads: bf16 ones under --bf16-matmul kmajor or dot,
  // int8 ones where Q8PacksKMajor() (f32 weights take nothing).
  const bool bf16 = PacksKMajor(GetBf16Matmul()) && GemvAvailable(), q8 = Q8PacksKMajor();
  if (!bf16 && !q8) return;
  HugePageArena arena;
  const bool keep = KMajorKeepsRowMajor();
  const auto pack = [&](at::Tensor* w) {
    if (!w->defined()) return false;  // gpt-oss: no dense experts
    if (!(w->scalar_type() == at::kBFloat16 ? bf16 : IsQ8(*w) && q8)) return false;
    if (keep) return packs->Add(*w, &arena);
    // The values are about to go: the fingerprint hashes them first, once.
    if (fingerprint_.empty()) fingerprint_ = ModelFingerprint(w_);
    return packs->Take(w, &arena);
  };
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    LayerWeights& L = w_.layers[l];
    Fused& f = fused_[l];
    pack(&f.qkv);
    pack(&L.o_proj);
    pack(&f.gate_up);
    pack(&L.down_proj);
    for (size_t j = 0; j < f.shared.size(); ++j) {
      pack(&f.shared[j]);
      pack(&L.shared_down[j]);
    }
    BindFusedViews(l);  // views of the stand-ins where the packs took the matrices
  }
  pack(w_.config.tie_embeddings ? &w_.embed : &w_.head);
  if (!packs->holds_only_copies()) fingerprint_.clear();
  if (packs->count() > 0) kmajor_ = std::move(packs);
}

std::string Transformer::Fingerprint() const { return fingerprint_.empty() ? ModelFingerprint(w_) : fingerprint_; }

at::Tensor Transformer::Embed(const at::Tensor& ids) const {
  if (IsQ8(w_.embed)) return EmbedRowsQ8(w_.embed, ids);
  const int64_t V = w_.embed.size(0), D = w_.embed.size(1);
  // Gathered from the pack where there is one (the same values as the
  // matrix's, which a stand-in no longer holds).
  const uint16_t* pack = kmajor_ != nullptr ? kmajor_->Find(w_.embed.data_ptr(), V, D) : nullptr;
  if (pack == nullptr) return w_.embed.index_select(0, ids).to(at::kFloat);
  const at::Tensor ic = ids.contiguous();
  const int64_t N = ic.size(0);
  const int64_t* ip = ic.data_ptr<int64_t>();
  at::Tensor x = at::empty({N, D}, at::kFloat);
  float* xp = x.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) WidenKMajorRow(pack, D, ip[n], xp + n * D);
  return x;
}

std::vector<at::Tensor> Transformer::ClampedSinks() const {
  std::vector<at::Tensor> out;
  out.reserve(w_.layers.size());
  for (const LayerWeights& L : w_.layers) {
    out.push_back(at::clamp(L.sink_bias, w_.config.sink_clamp_lo, w_.config.sink_clamp_hi));
  }
  return out;
}

absl::StatusOr<at::Tensor> Transformer::Forward(const at::Tensor& ids, const std::vector<Segment>& segments,
                                                const ForwardOptions& options) const {
  try {
    const ScopedPackedF32 packs(packed_.get());
    const ScopedKMajorPacks kmajor(kmajor_.get());
    return ForwardImpl(ids, segments, options);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("forward failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("forward failed: ", e.what()));
  }
}

absl::StatusOr<at::Tensor> Transformer::DecodeStepAttention(int64_t layer, const at::Tensor& q,
                                                            const at::Tensor& k, const at::Tensor& v,
                                                            const std::vector<Segment>& segments,
                                                            const at::Tensor& sinks) const {
  const ModelConfig& c = w_.config;
  const int64_t B = static_cast<int64_t>(segments.size()), H = c.n_heads, d = c.head_dim;
  std::vector<DecodeAttnRows> rows(B);
  DecodeAttnShape shape{H, c.n_kv_heads, d, false};
  // Each sequence's new K/V row goes straight into its cache (AppendRow),
  // and the kernel reads the cache's storage (UnorderedRows): no tensor
  // calls per sequence. Every sequence has its own cache, so no append
  // below moves rows another one reads.
  const at::Tensor kc = k.to(at::kFloat).contiguous(), vc = v.to(at::kFloat).contiguous();
  const float* kp = kc.data_ptr<float>();
  const float* vp = vc.data_ptr<float>();
  const int64_t R = c.n_kv_heads * d;
  for (int64_t b = 0; b < B; ++b) {
    MixedKVCache* cache = segments[b].cache;
    RETURN_IF_ERROR(cache->AppendRow(layer, kp + b * R, vp + b * R));
    const MixedKVCache::RowsView view = cache->UnorderedRows(layer);
    shape.bf16 = cache->options().dtype == KvDtype::kBF16;
    rows[b] = {view.k, view.v, view.rows};
  }
  const at::Tensor qc = q.contiguous();
  const at::Tensor sc = sinks.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({B, H * d}, at::kFloat);
  const float* qp = qc.data_ptr<float>();
  const float* sp = sc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // Flash-decoding: every (sequence, split of kDecodeSplitRows rows) is one
  // task, so one long sequence keeps every thread busy; a sequence's splits
  // are merged in order afterwards. Split boundaries depend on the
  // sequence's length alone: its result does not depend on the batch or
  // the thread count.
  const int64_t pf = DecodeAttnPartialFloats(shape);
  std::vector<int64_t> first(B + 1, 0);  // first task of sequence b
  for (int64_t b = 0; b < B; ++b) first[b + 1] = first[b] + DecodeAttnSplits(rows[b].rows);
  thread_local std::vector<float> partials;  // reused: no page faults per layer
  if (static_cast<int64_t>(partials.size()) < first[B] * pf) partials.resize(first[B] * pf);
  float* pp = partials.data();
  const DecodeAttnIsa isa = DecodeAttnDefaultIsa();
  // Tasks taken in runs of consecutive splits from a shared counter
  // (ForEachChunk): a thread that wakes late takes fewer runs instead of
  // holding up the region, and within a run a split prefetches the next
  // one's K while it computes (about 8 runs per thread, at most 8 splits).
  const int64_t run = std::clamp<int64_t>(first[B] / (8 * at::get_num_threads()), 1, 8);
  ForEachChunk(first[B], run, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> scratch;
    scratch.resize(DecodeAttnScratchFloats(shape));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = std::upper_bound(first.begin(), first.end(), t) - first.begin() - 1;
      const bool next_here = t + 1 < std::min(t1, first[b + 1]);
      DecodeAttentionSplit(qp + b * H * d, rows[b], shape, t - first[b], scratch.data(), pp + t * pf, isa,
                           next_here);
    }
  });
  for (int64_t b = 0; b < B; ++b) {
    DecodeAttentionMerge(pp + first[b] * pf, first[b + 1] - first[b], shape, sp, op + b * H * d);
  }
  return out;
}

absl::StatusOr<at::Tensor> Transformer::SegmentAttention(int64_t l, const at::Tensor& q, const at::Tensor& k,
                                                         const at::Tensor& v, const std::vector<Segment>& segments,
                                                         const at::Tensor& sinks) const {
  const ModelConfig& c = w_.config;
  const bool windowed = ModelConfig::IsWindowed(l);
  std::vector<at::Tensor> outs;
  int64_t off = 0;
  for (const Segment& s : segments) {
    at::Tensor qs = q.narrow(0, off, s.length), ks = k.narrow(0, off, s.length), vs = v.narrow(0, off, s.length);
    off += s.length;
    const int64_t window = windowed ? c.window : 0;
    at::Tensor keys, values;
    int64_t k_start = s.start_pos;  // position of keys[0]; keys in position order
    if (s.cache == nullptr) {
      keys = ks;
      values = vs;
    } else if (s.length == 1) {
      // A one-token step sees every row of its cache, in any order: on a
      // ring exactly the last `window` positions, itself included.
      RETURN_IF_ERROR(s.cache->Append(l, ks, vs));
      std::tie(keys, values) = s.cache->GetUnordered(l);
      outs.push_back(AttendWithSinks(qs, keys, values, sinks, at::Tensor()));
      continue;
    } else if (!windowed) {
      // Append first: a global layer keeps every row.
      RETURN_IF_ERROR(s.cache->Append(l, ks, vs));
      std::tie(keys, values) = s.cache->Get(l);
      k_start = 0;
    } else {
      // A multi-token chunk on a ring: early queries need keys the chunk
      // would overwrite, so attend over (past rows ++ chunk), then append.
      auto [pk, pv] = s.cache->Get(l);
      const int64_t past = pk.size(0);
      keys = past == 0 ? ks : at::cat({pk.to(ks.scalar_type()), ks});
      values = past == 0 ? vs : at::cat({pv.to(vs.scalar_type()), vs});
      k_start = s.start_pos - past;
      RETURN_IF_ERROR(s.cache->Append(l, ks, vs));
    }
    // By query blocks: the window's band, or the causal lower blocks.
    outs.push_back(BlockedAttendWithSinks(qs, keys, values, sinks, s.start_pos, k_start, window));
  }
  return outs.size() == 1 ? outs[0] : at::cat(outs);
}

namespace {

// Checks the segments against the config and their caches, and `ids`
// against the segments and the vocabulary. Returns the token count N.
absl::StatusOr<int64_t> CheckForwardInputs(const ModelConfig& c, const at::Tensor& ids,
                                           const std::vector<Segment>& segments) {
  int64_t N = 0;
  for (const Segment& s : segments) {
    if (s.length <= 0 || s.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat("segment with start ", s.start_pos, " and length ", s.length));
    }
    if (s.start_pos + s.length > c.max_context) {
      return absl::InvalidArgumentError(absl::StrCat("positions up to ", s.start_pos + s.length,
                                                     " exceed max_context ", c.max_context));
    }
    // Layer 1 is the first global layer: its length is the sequence length.
    if (s.cache != nullptr && c.n_layers > 1 && s.cache->seq_len(1) != s.start_pos) {
      return absl::InvalidArgumentError(absl::StrCat("segment starts at ", s.start_pos, " but its cache holds ",
                                                     s.cache->seq_len(1), " positions"));
    }
    N += s.length;
  }
  if (ids.dim() != 1 || ids.size(0) != N) {
    return absl::InvalidArgumentError(absl::StrCat("ids has shape ", c10::str(ids.sizes()),
                                                   ", segments cover ", N, " tokens"));
  }
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", lo < 0 ? lo : hi, " outside [0, ",
                                                   c.vocab_size, ")"));
  }
  return N;
}

// cos/sin rows for every token, [0] for windowed and [1] for global layers:
// the table for multi-token segments, the scalar path for one-token steps
// (same numbers either way).
void RopeRows(const Rope& rope, const std::vector<Segment>& segments, at::Tensor cos[2], at::Tensor sin[2]) {
  const bool all_single =
      std::all_of(segments.begin(), segments.end(), [](const Segment& s) { return s.length == 1; });
  for (int g = 0; g < 2; ++g) {
    if (all_single) {
      std::vector<int64_t> single;
      for (const Segment& s : segments) single.push_back(s.start_pos);
      rope.ForPositions(single, g == 1, &cos[g], &sin[g]);
      continue;
    }
    std::vector<at::Tensor> cs, ss;
    for (const Segment& s : segments) {
      at::Tensor cc, sc;
      rope.Table(s.start_pos, s.length, g == 1, &cc, &sc);
      cs.push_back(cc);
      ss.push_back(sc);
    }
    cos[g] = cs.size() == 1 ? cs[0] : at::cat(cs);
    sin[g] = ss.size() == 1 ? ss[0] : at::cat(ss);
  }
}

// The rows of x ([N, D]) that end each segment.
at::Tensor LastRows(const at::Tensor& x, const std::vector<Segment>& segments, int64_t N) {
  std::vector<int64_t> last;
  int64_t end = 0;
  for (const Segment& s : segments) last.push_back((end += s.length) - 1);
  if (last.size() == 1 && last[0] == N - 1 && N == 1) return x;
  return x.index_select(0, at::tensor(last, at::kLong));
}

}  // namespace

absl::StatusOr<at::Tensor> Transformer::ForwardImpl(const at::Tensor& ids, const std::vector<Segment>& segments,
                                                    const ForwardOptions& options) const {
  const ModelConfig& c = config();
  const int64_t H = c.n_heads, K = c.n_kv_heads, d = c.head_dim;
  ASSIGN_OR_RETURN(const int64_t N, CheckForwardInputs(c, ids, segments));
  at::Tensor cos[2], sin[2];
  RopeRows(rope_, segments, cos, sin);

  std::vector<at::Tensor> local_sinks;
  const std::vector<at::Tensor>* sinks = options.sinks;
  if (sinks == nullptr) {
    local_sinks = ClampedSinks();
    sinks = &local_sinks;
  }

  // A decode step (one new token per cached sequence) takes the fused
  // attention kernel: one call for all sequences instead of ~15 ATen calls
  // per sequence and layer.
  const bool fused_decode_attention =
      GemvAvailable() && !at::GradMode::is_enabled() &&
      std::all_of(segments.begin(), segments.end(), [](const Segment& s) {
        return s.length == 1 && s.cache != nullptr;
      });

  at::Tensor x = Embed(ids);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    const int g = ModelConfig::IsWindowed(l) ? 0 : 1;
    at::Tensor h = RmsNorm(x, L.norm1, c.norm_eps);
    at::Tensor q, kv;
    if (!fused_.empty()) {
      at::Tensor qkv = Linear(h, fused_[l].qkv);
      if (L.qkv_bias.defined()) qkv = qkv + L.qkv_bias;  // gpt-oss
      q = qkv.narrow(1, 0, H * d).reshape({N, H, d});
      kv = qkv.narrow(1, H * d, 2 * K * d);
    } else {
      q = Linear(h, L.q_proj);
      kv = Linear(h, L.kv_proj);
      if (L.qkv_bias.defined()) {
        q = q + L.qkv_bias.narrow(0, 0, H * d);
        kv = kv + L.qkv_bias.narrow(0, H * d, 2 * K * d);
      }
      q = q.view({N, H, d});
    }
    q = Rope::Apply(q, cos[g], sin[g]);
    at::Tensor k = Rope::Apply(kv.narrow(1, 0, K * d).view({N, K, d}), cos[g], sin[g]);
    at::Tensor v = kv.narrow(1, K * d, K * d).reshape({N, K, d});

    ASSIGN_OR_RETURN(at::Tensor attn, fused_decode_attention
                                          ? DecodeStepAttention(l, q, k, v, segments, (*sinks)[l])
                                          : SegmentAttention(l, q, k, v, segments, (*sinks)[l]));
    if (options.after_layer) RETURN_IF_ERROR(options.after_layer(l));
    at::Tensor o = Linear(attn, L.o_proj);
    if (L.o_bias.defined()) o = o + L.o_bias;  // gpt-oss
    x = x + o;
    x = x + Moe(l, RmsNorm(x, L.norm2, c.norm_eps));
  }

  if (!options.all_logits) x = LastRows(x, segments, N);
  const at::Tensor& head = c.tie_embeddings ? w_.embed : w_.head;
  return Linear(RmsNorm(x, w_.norm, c.norm_eps), head);
}

}  // namespace pdserve
