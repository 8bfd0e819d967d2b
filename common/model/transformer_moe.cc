// Transformer's mixture of experts: the router's top-k, the shared and
// routed expert MLPs, and their weighted sum (docs/model.md, "MoE"). The
// general path is ATen ops (it trains under autograd and runs prefill);
// decode-sized batches take MoeRows, every expert of a layer in two
// parallel regions, with the same bits.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_matrix.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_tiles.h"
#include "common/model/moe_mxfp4.h"
#include "common/model/transformer.h"

namespace pdserve {

namespace {

at::Tensor Mlp(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return Linear(at::silu(Linear(x, gate)) * Linear(x, up), down);
}

at::Tensor GateUpMlp(const at::Tensor& x, const at::Tensor& gate_up, const at::Tensor& down) {
  const at::Tensor gu = Linear(x, gate_up);
  const int64_t F = gu.size(1) / 2;
  return Linear(at::silu(gu.narrow(1, 0, F)) * gu.narrow(1, F, F), down);
}

// Top-k expert ids per row, descending by logit, ties to the lower index.
at::Tensor TopKExperts(const at::Tensor& router_logits, int64_t top_k) {
  at::Tensor r = router_logits.detach().contiguous();
  const int64_t N = r.size(0), E = r.size(1);
  at::Tensor idx = at::empty({N, top_k}, at::kLong);
  const float* rp = r.data_ptr<float>();
  int64_t* ip = idx.data_ptr<int64_t>();
  std::vector<int64_t> order(E);
  for (int64_t n = 0; n < N; ++n) {
    const float* row = rp + n * E;
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [row](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    std::copy(order.begin(), order.begin() + top_k, ip + n * top_k);
  }
  return idx;
}

// The gates: softmax over each row's top-k router logits (idx from
// TopKExperts), in fp32. Without autograd, one row-local loop (max, exp,
// sum in slot order, divide) instead of gather + softmax.
at::Tensor TopKGates(const at::Tensor& logits, const at::Tensor& idx) {
  const bool needs_grad = at::GradMode::is_enabled() && logits.requires_grad();
  if (needs_grad || logits.scalar_type() != at::kFloat) return at::softmax(at::gather(logits, 1, idx), 1);
  const at::Tensor r = logits.contiguous();
  const int64_t N = r.size(0), E = r.size(1), top_k = idx.size(1);
  at::Tensor gates = at::empty({N, top_k}, at::kFloat);
  const float* rp = r.data_ptr<float>();
  const int64_t* ip = idx.data_ptr<int64_t>();
  float* gp = gates.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    const float* row = rp + n * E;
    float* g = gp + n * top_k;
    float m = row[ip[n * top_k]];
    for (int64_t s = 1; s < top_k; ++s) m = std::max(m, row[ip[n * top_k + s]]);
    float sum = 0;
    for (int64_t s = 0; s < top_k; ++s) sum += (g[s] = std::exp(row[ip[n * top_k + s]] - m));
    for (int64_t s = 0; s < top_k; ++s) g[s] /= sum;
  }
  return gates;
}

// One expert MLP of MoeRows: its matrices, its rows of x, and where its
// rows sit in MoeRows' buffers (first .. first + rows).
struct ExpertRows {
  GemvMatrix gate_up, down;  // [2F, D], [D, F]
  GemvX x;                   // [rows, D], prepared for gate_up's kernel
  int64_t rows = 0, first = 0;
};

// Which rows of h [N, D] each expert of one layer takes, and where its
// rows sit in MoeRows' buffers: the shared experts over every row first,
// then each routed expert over the rows routed to it, in row order (as
// Moe's index_select gathers them).
class MoePlan {
 public:
  MoePlan(const float* h, int64_t N, int64_t D, int64_t top_k)
      : h_(h), N_(N), D_(D), top_k_(top_k), where_(N * top_k), routed_x_(N * top_k * D) {}

  void AddShared(GemvMatrix gate_up, GemvMatrix down) {
    experts.push_back({gate_up, down, GemvX{h_}, N_, next_});
    next_ += N_;
    shared_rows_ = next_;
  }
  // Expert e over the rows whose top-k (idx [N, top_k]) holds it, if any.
  void AddRouted(int64_t e, const int64_t* idx, GemvMatrix gate_up, GemvMatrix down) {
    ExpertRows ex{gate_up, down, GemvX{RoutedX(next_)}, 0, next_};
    for (int64_t i = 0; i < N_ * top_k_; ++i) {
      if (idx[i] != e) continue;
      std::copy(h_ + (i / top_k_) * D_, h_ + (i / top_k_ + 1) * D_, RoutedX(next_));
      where_[i] = next_++;
      ++ex.rows;
    }
    if (ex.rows > 0) experts.push_back(ex);
  }
  // Every matrix is usable by the kernels, all gate|up of one kind and all
  // down of one kind (so one preparation of x serves each).
  bool Usable() const {
    const auto usable = [](const GemvMatrix& m) { return m.data != nullptr && (!m.q8 || GemvQ8Available()); };
    return !experts.empty() && std::all_of(experts.begin(), experts.end(), [&](const ExpertRows& ex) {
      return usable(ex.gate_up) && usable(ex.down) && ex.gate_up.same_kind(experts[0].gate_up) &&
             ex.down.same_kind(experts[0].down);
    });
  }
  int64_t rows() const { return next_; }
  // Each expert's rows prepared for the gate|up kernel (rounded once where
  // it rounds x, not per chunk).
  void PrepareInputs() {
    const GemvX h = PrepareGemvX(experts[0].gate_up, h_, N_, &h_buffer_);
    const GemvX routed = PrepareGemvX(experts[0].gate_up, routed_x_.data(), next_ - shared_rows_, &routed_buffer_);
    for (ExpertRows& ex : experts) ex.x = ex.first < shared_rows_ ? h : routed.From(ex.first - shared_rows_, D_);
  }
  // Columns [n0, n1) of out [N, D] from the experts' outputs y [rows(), D],
  // in Moe's order and roundings: the S shared outputs added in turn, then
  // each routed product g * y rounded and added in slot order (this file is
  // built without FMA, so nothing fuses the multiply and add).
  void SumOutputs(const float* y, int64_t S, const float* gates, int64_t n0, int64_t n1, float* out) const {
    for (int64_t n = 0; n < N_; ++n) {
      for (int64_t c = n0; c < n1; ++c) {
        float o = S > 0 ? y[n * D_ + c] : 0.0f;
        for (int64_t j = 1; j < S; ++j) o = o + y[(j * N_ + n) * D_ + c];
        for (int64_t s = 0; s < top_k_; ++s) {
          const float t = gates[n * top_k_ + s] * y[where_[n * top_k_ + s] * D_ + c];
          o = o + t;
        }
        out[n * D_ + c] = o;
      }
    }
  }

  std::vector<ExpertRows> experts;

 private:
  float* RoutedX(int64_t row) { return routed_x_.data() + (row - shared_rows_) * D_; }

  const float* h_;
  int64_t N_, D_, top_k_;
  int64_t next_ = 0, shared_rows_ = 0;
  std::vector<int64_t> where_;  // buffer row of (row n, slot s)
  std::vector<float> routed_x_;
  GemvXBuffer h_buffer_, routed_buffer_;
};

}  // namespace

at::Tensor Transformer::ExpertMlp(int64_t layer, int64_t e, const at::Tensor& x) const {
  const LayerWeights& L = w_.layers[layer];
  if (!fused_.empty()) return GateUpMlp(x, fused_[layer].gate_up.select(0, e), L.down_proj.select(0, e));
  return Mlp(x, L.gate_proj.select(0, e), L.up_proj.select(0, e), L.down_proj.select(0, e));
}

at::Tensor Transformer::SharedMlp(int64_t layer, int64_t j, const at::Tensor& x) const {
  const LayerWeights& L = w_.layers[layer];
  if (!fused_.empty()) return GateUpMlp(x, fused_[layer].shared[j], L.shared_down[j]);
  return Mlp(x, L.shared_gate[j], L.shared_up[j], L.shared_down[j]);
}

at::Tensor Transformer::MoeRows(int64_t layer, const at::Tensor& h, const int64_t* idx, const float* gates) const {
  const LayerWeights& L = w_.layers[layer];
  const Fused& f = fused_[layer];
  const int64_t N = h.size(0), D = h.size(1), S = static_cast<int64_t>(f.shared.size()), top_k = config().top_k;
  const at::Tensor hc = h.contiguous();
  MoePlan plan(hc.data_ptr<float>(), N, D, top_k);
  for (int64_t j = 0; j < S; ++j) plan.AddShared(AsGemvMatrix(f.shared[j]), AsGemvMatrix(L.shared_down[j]));
  for (int64_t e = 0; e < config().n_experts; ++e) {
    plan.AddRouted(e, idx, AsGemvMatrix(f.gate_up, e), AsGemvMatrix(L.down_proj, e));
  }
  if (!plan.Usable()) return at::Tensor();
  const int64_t T = plan.rows(), F = plan.experts[0].gate_up.rows / 2;
  plan.PrepareInputs();

  // Region 1: every expert's gate|up over its rows, chunk by chunk of the
  // 2F output columns (whole k-major groups where the experts have packs).
  const int64_t align = plan.experts[0].gate_up.packed() ? kKMajorGroup : 1;
  at::Tensor gu = at::empty({T, 2 * F}, at::kFloat);
  float* gp = gu.data_ptr<float>();
  ForEachChunk(2 * F, GemvChunkRows(2 * F, align), [&](int64_t n0, int64_t n1) {
    for (const ExpertRows& ex : plan.experts) {
      GemvAllRows(ex.x, ex.rows, ex.gate_up, n0, n1, gp + ex.first * 2 * F, 2 * F);
    }
  });
  // As GateUpMlp, expert by expert (the same ATen ops on the same shapes).
  at::Tensor act = at::empty({T, F}, at::kFloat);
  for (const ExpertRows& ex : plan.experts) {
    const at::Tensor g = gu.narrow(0, ex.first, ex.rows);
    at::Tensor a = act.narrow(0, ex.first, ex.rows);
    at::silu_out(a, g.narrow(1, 0, F));  // then times up in place: no temporary, the same products
    a.mul_(g.narrow(1, F, F));
  }
  // Region 2: every expert's down projection, then the weighted sums of
  // each chunk's columns.
  const float* ap = act.data_ptr<float>();
  thread_local GemvXBuffer act_buffer;
  const GemvX act_x = PrepareGemvX(plan.experts[0].down, ap, T, &act_buffer);
  at::Tensor y = at::empty({T, D}, at::kFloat);
  at::Tensor out = at::empty({N, D}, at::kFloat);
  float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  ForEachChunk(D, GemvChunkRows(D, align), [&](int64_t n0, int64_t n1) {
    for (const ExpertRows& ex : plan.experts) {
      GemvAllRows(act_x.From(ex.first, F), ex.rows, ex.down, n0, n1, yp + ex.first * D, D);
    }
    plan.SumOutputs(yp, S, gates, n0, n1, op);
  });
  return out;
}

at::Tensor Transformer::Moe(int64_t layer, const at::Tensor& h) const {
  const LayerWeights& L = w_.layers[layer];
  const int64_t N = h.size(0);
  at::Tensor logits = LinearRowwise(h, L.router);  // [N, E]; any N: the same bits per row
  if (L.router_bias.defined()) logits = logits + L.router_bias;
  at::Tensor idx = TopKExperts(logits, config().top_k);
  at::Tensor gates = TopKGates(logits, idx);  // [N, top_k]
  if (L.mxfp4 != nullptr) {
    // gpt-oss: the experts stay MXFP4 in the mapping (moe_mxfp4.h), any N.
    const at::Tensor hc = h.to(at::kFloat).contiguous(), g = gates.contiguous();
    at::Tensor out = at::empty({N, h.size(1)}, at::kFloat);
    MoeMxfp4(*L.mxfp4, hc.data_ptr<float>(), N, idx.data_ptr<int64_t>(), g.data_ptr<float>(), config().top_k,
             out.data_ptr<float>());
    return out;
  }

  // Decode-sized batches through the decode kernels: every expert's
  // matmuls in two parallel regions instead of 2 per expert, and no
  // gather/scatter tensor calls.
  if (N <= kGemvMaxBatchRows && !fused_.empty() && GemvAvailable() && !at::GradMode::is_enabled() &&
      h.scalar_type() == at::kFloat && h.dim() == 2) {
    const at::Tensor g = gates.contiguous();
    at::Tensor out = MoeRows(layer, h, idx.data_ptr<int64_t>(), g.data_ptr<float>());
    if (out.defined()) return out;
  }

  at::Tensor out;
  for (size_t j = 0; j < L.shared_gate.size(); ++j) {
    at::Tensor s = SharedMlp(layer, static_cast<int64_t>(j), h);
    out = out.defined() ? out + s : s;
  }
  if (!out.defined()) out = at::zeros_like(h);

  const int64_t* ip = idx.data_ptr<int64_t>();
  if (N == 1) {
    // One token (batch-1 decode): no gather/scatter needed.
    for (int64_t s = 0; s < config().top_k; ++s) {
      const int64_t e = ip[s];
      out = out + gates.select(1, s) * ExpertMlp(layer, e, h);
    }
    return out;
  }
  // Group rows by expert so each expert runs one matmul over its rows.
  std::vector<std::vector<int64_t>> rows(config().n_experts), slots(config().n_experts);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t s = 0; s < config().top_k; ++s) {
      rows[ip[n * config().top_k + s]].push_back(n);
      slots[ip[n * config().top_k + s]].push_back(n * config().top_k + s);
    }
  }
  // Each (row, slot) contribution lands in its own place and is summed in
  // slot order afterwards, as the N == 1 path sums it: a sequence's tokens
  // do not depend on which others share its batch.
  at::Tensor flat_gates = gates.reshape({-1});
  at::Tensor contrib = at::empty({N * config().top_k, h.size(1)}, out.options());
  for (int64_t e = 0; e < config().n_experts; ++e) {
    if (rows[e].empty()) continue;
    at::Tensor slot = at::tensor(slots[e], at::kLong);
    at::Tensor y = ExpertMlp(layer, e, h.index_select(0, at::tensor(rows[e], at::kLong)));
    contrib.index_copy_(0, slot, flat_gates.index_select(0, slot).unsqueeze(1) * y);
  }
  contrib = contrib.view({N, config().top_k, h.size(1)});
  for (int64_t s = 0; s < config().top_k; ++s) out = out + contrib.select(1, s);
  return out;
}

}  // namespace pdserve
