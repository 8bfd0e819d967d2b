#include "bench/matvec_probe.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_clock.h"
#include "common/engine/engine.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/kmajor_packs.h"
#include "common/kernels/linear_int8.h"

namespace pdserve::bench {

namespace {

// Ways to multiply one row by a weight matrix.
enum class MatVec {
  kEngine,    // pdserve::Linear, whatever the engine does today
  kAtLinear,  // at::linear on a [1, in] row in the weight's dtype (BLAS sgemm / ATen bf16 gemm)
  kAtMv,      // at::mv in the weight's dtype (BLAS sgemv / ATen bf16 gemv)
};

// Mean ms per matrix-vector product over a pool of same-shaped weights used
// round-robin (a pool larger than the L3 keeps the weights cold, as in a
// decode step). NaN for at::linear and at::mv where only the engine's
// Linear reads the weights (`packed_only`: k-major packs in place of them).
double ProbeMatVec(const std::vector<at::Tensor>& pool, MatVec how, bool packed_only) {
  at::NoGradGuard no_grad;
  const at::ScalarType st = pool[0].scalar_type();
  const bool q8 = pdserve::IsQ8(pool[0]);  // only the engine's Linear takes Q8_0
  if ((q8 || packed_only) && how != MatVec::kEngine) return std::nan("");
  const int64_t K = q8 ? pool[0].size(1) / pdserve::kQ8BlockBytes * pdserve::kQ8Block : pool[0].size(1);
  const at::Tensor x = at::randn({1, K}, at::kFloat);
  const at::Tensor xs = x.to(st), xv = xs.view({-1});
  auto call = [&](const at::Tensor& w) {
    switch (how) {
      case MatVec::kEngine:
        (void)pdserve::Linear(x, w);
        break;
      case MatVec::kAtLinear:
        (void)at::linear(xs, w);
        break;
      case MatVec::kAtMv:
        (void)at::mv(w, xv);
        break;
    }
  };
  for (size_t i = 0; i < std::min<size_t>(3, pool.size()); ++i) call(pool[i]);  // warm up code paths
  int64_t calls = 0;
  const auto t0 = Clock::now();
  while (calls < static_cast<int64_t>(pool.size()) || calls < 5 || (calls < 5000 && MsSince(t0) < 300.0)) {
    call(pool[calls % pool.size()]);
    ++calls;
  }
  return MsSince(t0) / static_cast<double>(calls);
}

// The [rows, K] matrix that starts where `first` (a contiguous view of its
// first rows, or of one expert of a stack) starts: the fused q|kv or gate|up
// the engine multiplies, rebuilt from the per-projection views.
at::Tensor Fused(const at::Tensor& first, int64_t rows) {
  return first.as_strided({rows, first.size(1)}, {first.size(1), 1}, first.storage_offset());
}

}  // namespace

// The matrices in the shapes a decode step multiplies (Transformer fuses
// q|kv and each expert's gate|up at load).
std::vector<Probe> CollectProbes(const pdserve::Engine& engine) {
  const pdserve::ModelConfig& c = engine.config();
  const pdserve::ModelWeights& W = engine.model().weights();
  const double nl = static_cast<double>(c.n_layers);
  const double mlps = static_cast<double>(c.top_k + c.n_shared_experts);
  const int64_t qkv_rows = W.layers[0].q_proj.size(0) + W.layers[0].kv_proj.size(0);
  const int64_t F = W.layers[0].gate_proj.size(1);
  Probe qkv{"attn q|kv", {}, nl}, o{"attn o_proj", {}, nl}, router{"moe router (fp32)", {}, nl},
      gate_up{"mlp gate|up", {}, mlps * nl}, down{"mlp down", {}, mlps * nl};
  for (const pdserve::LayerWeights& L : W.layers) {
    qkv.pool.push_back(Fused(L.q_proj, qkv_rows));
    o.pool.push_back(L.o_proj);
    router.pool.push_back(L.router);
    for (int64_t e = 0; e < c.n_experts; ++e) {
      gate_up.pool.push_back(Fused(L.gate_proj.select(0, e), 2 * F));
      down.pool.push_back(L.down_proj.select(0, e));
    }
  }
  return {qkv, o, router, gate_up, down, {"head (tied)", {c.tie_embeddings ? W.embed : W.head}, 1}};
}

ProbeSums TimeProbes(const pdserve::Engine& engine, std::vector<Probe>* probes) {
  // The engine's kernels as a decode step runs them: with the model's k-major
  // packs in scope under --bf16-matmul kmajor (Transformer::Forward does the same).
  const pdserve::KMajorPacks* packs = engine.model().kmajor_packs();
  const pdserve::ScopedKMajorPacks kmajor(packs);
  ProbeSums sums;
  for (Probe& p : *probes) {
    const bool packed_only =
        packs != nullptr && packs->holds_only_copies() && p.pool[0].scalar_type() == at::kBFloat16;
    p.ms_linear = ProbeMatVec(p.pool, MatVec::kEngine, packed_only);
    p.ms_at_linear = ProbeMatVec(p.pool, MatVec::kAtLinear, packed_only);
    p.ms_mv = ProbeMatVec(p.pool, MatVec::kAtMv, packed_only);
    sums.linear += p.ms_linear * p.per_step;
    sums.at_linear += p.ms_at_linear * p.per_step;
    sums.mv += p.ms_mv * p.per_step;
  }
  return sums;
}

void PrintProbes(const std::vector<Probe>& probes, const ProbeSums& sums, const std::vector<double>& step_ms) {
  std::printf(
      "\nmatrix-vector probe (one row, weights cold: round-robin over all copies of the shape; mean ms and GB/s\n"
      "of weight bytes): pdserve::Linear (the engine's kernels, on the k-major packs under --bf16-matmul kmajor),\n"
      "at::linear and at::mv in the weight's dtype. A pool (all copies, MB) that fits the L3 reads partly from\n"
      "cache, unlike a decode step, which streams every other weight between two uses of one.\n");
  std::printf("  %-18s %-13s %5s %5s %7s %9s %6s %10s %6s %9s %6s\n", "weight", "shape", "dtype", "/tok", "pool MB",
              "engine", "GB/s", "at::linear", "GB/s", "at::mv", "GB/s");
  for (const Probe& p : probes) {
    const at::Tensor& w = p.pool[0];
    const double mb = static_cast<double>(w.numel() * w.element_size()) / 1e6;
    std::printf("  %-18s %-13s %5s %5.0f %7.0f %9.3f %6.2f %10.3f %6.2f %9.3f %6.2f\n", p.what.c_str(),
                absl::StrCat("[", absl::StrJoin(w.sizes(), ","), "]").c_str(),
                pdserve::IsQ8(w) ? "int8" : w.scalar_type() == at::kBFloat16 ? "bf16" : "f32", p.per_step,
                mb * static_cast<double>(p.pool.size()), p.ms_linear, mb / p.ms_linear,
                p.ms_at_linear, mb / p.ms_at_linear, p.ms_mv, mb / p.ms_mv);
  }
  const double mean_step = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / static_cast<double>(step_ms.size());
  std::printf(
      "  one token's products: engine %.2f ms (%.0f%% of the mean cached step, %.2f ms), at::linear %.2f ms, "
      "at::mv %.2f ms\n",
      sums.linear, 100.0 * sums.linear / mean_step, mean_step, sums.at_linear, sums.mv);
}

}  // namespace pdserve::bench
