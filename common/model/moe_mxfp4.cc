#include "common/model/moe_mxfp4.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/kernels/gemv_kernels.h"

namespace pdserve {

namespace {

std::atomic<Mxfp4KernelChoice> g_kernel{Mxfp4KernelChoice::kFma};

// x [R, K] prepared for one kernel: packed fp32 (Fma) or int8 with per-block
// scales (Dot), both in the kernels' order.
struct PreparedRows {
  std::vector<float> xp;
  std::vector<int8_t> xq;
  std::vector<float> xs;
  int64_t K = 0;

  void Prepare(const float* x, int64_t R, int64_t K_, Mxfp4KernelChoice kernel) {
    K = K_;
    if (kernel == Mxfp4KernelChoice::kFma) {
      xp.resize(R * K);
      at::parallel_for(0, R, 16, [&](int64_t r0, int64_t r1) { PackRowsMxfp4(x + r0 * K, r1 - r0, K, &xp[r0 * K]); });
    } else {
      xq.resize(R * K);
      xs.resize(R * Mxfp4RowScales(K));
      at::parallel_for(0, R, 16, [&](int64_t r0, int64_t r1) {
        QuantizeRowsMxfp4(x + r0 * K, r1 - r0, K, &xq[r0 * K], &xs[r0 * Mxfp4RowScales(K)]);
      });
    }
  }
  // y[m * ldy + n] for rows [r0, r0 + M) of x, weight rows [n0, n1); M <=
  // kGemvMaxRows, except for the fma kernel (GemmMxfp4Fma: the same bits).
  void Gemv(Mxfp4KernelChoice kernel, int64_t r0, int64_t M, const Mxfp4Matrix& W, int64_t n0, int64_t n1,
            float* y, int64_t ldy) const {
    if (kernel == Mxfp4KernelChoice::kFma) {
      if (M > kGemvMaxRows) return GemmMxfp4Fma(&xp[r0 * K], M, W, n0, n1, y, ldy);
      GemvMxfp4Fma(&xp[r0 * K], M, W, n0, n1, y, ldy);
    } else {
      GemvMxfp4Dot(&xq[r0 * K], &xs[r0 * Mxfp4RowScales(K)], M, W, n0, n1, y, ldy);
    }
  }
};

// One unit of a projection's parallel region: rows of one expert against
// one tile of its weight rows: up to kGemvMaxRows of them (the GEMV
// kernels), or all of them (fma with more: GemmMxfp4Fma decodes the tile once).
struct Task {
  int64_t expert, r0, M, n0, n1;
};

// y [R, N] = W_e x for every expert's rows (rows [first[e], first[e + 1])
// of x and y), W_e = mats[e] with N rows; one parallel region over every
// tile, expert and row group. Tiles outermost: at::parallel_for hands each
// thread a contiguous run of tasks, and a run of whole tiles holds every
// expert's rows in proportion, however unequal the experts' shares are.
void ProjectAll(const std::vector<Mxfp4Matrix>& mats, const std::vector<int64_t>& first, const PreparedRows& x,
                int64_t N, Mxfp4KernelChoice kernel, float* y) {
  const int64_t E = static_cast<int64_t>(mats.size());
  const int64_t tile = GemvTileRows(Mxfp4RowBytes(x.K) + Mxfp4RowScales(x.K));
  std::vector<Task> tasks;
  for (int64_t n0 = 0; n0 < N; n0 += tile) {
    for (int64_t e = 0; e < E; ++e) {
      const int64_t rows = first[e + 1] - first[e];
      const int64_t group = kernel == Mxfp4KernelChoice::kFma && rows > kGemvMaxRows ? rows : kGemvMaxRows;
      for (int64_t r = first[e]; r < first[e + 1]; r += group) {
        tasks.push_back({e, r, std::min(group, first[e + 1] - r), n0, std::min(N, n0 + tile)});
      }
    }
  }
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const Task& k = tasks[t];
      x.Gemv(kernel, k.r0, k.M, mats[k.expert], k.n0, k.n1, y + k.r0 * N, N);
    }
  });
}

}  // namespace

void ClampedSwigluRow(const float* gu, int64_t F, float limit, float* act) {
  for (int64_t j = 0; j < F; ++j) {
    const float g = std::min(gu[2 * j], limit);
    const float u = std::min(std::max(gu[2 * j + 1], -limit), limit);
    const float glu = g * (1.0f / (1.0f + std::exp(-1.702f * g)));
    act[j] = glu * (u + 1.0f);
  }
}

absl::StatusOr<Mxfp4KernelChoice> ParseMxfp4Kernel(const std::string& name) {
  if (name == "fma") return Mxfp4KernelChoice::kFma;
  if (name == "dot") return Mxfp4KernelChoice::kDot;
  return absl::InvalidArgumentError(
      absl::StrCat("--mxfp4-kernel must be fma or dot, not '", name.substr(0, 64), "'"));
}

void SetMoeMxfp4Kernel(Mxfp4KernelChoice kernel) { g_kernel.store(kernel); }
Mxfp4KernelChoice GetMoeMxfp4Kernel() { return g_kernel.load(); }

void MoeMxfp4(const Mxfp4Experts& ex, const float* h, int64_t N, const int64_t* idx, const float* gates,
              int64_t top_k, float* out) {
  const int64_t D = ex.d_model, F = ex.hidden, E = ex.n_experts(), R = N * top_k;
  const Mxfp4KernelChoice kernel = GetMoeMxfp4Kernel();
  // Each expert's rows, in row order, side by side: slot i = n * top_k + s
  // goes to row where[i] of the buffers.
  std::vector<int64_t> first(E + 1, 0), where(R);
  for (int64_t i = 0; i < R; ++i) ++first[idx[i] + 1];
  for (int64_t e = 0; e < E; ++e) first[e + 1] += first[e];
  std::vector<int64_t> next(first.begin(), first.end() - 1);
  std::vector<float> x(R * D);
  for (int64_t i = 0; i < R; ++i) {
    where[i] = next[idx[i]]++;
    std::copy(h + (i / top_k) * D, h + (i / top_k + 1) * D, &x[where[i] * D]);
  }

  PreparedRows px;
  px.Prepare(x.data(), R, D, kernel);
  std::vector<float> gu(R * 2 * F);
  ProjectAll(ex.gate_up, first, px, 2 * F, kernel, gu.data());

  std::vector<float> act(R * F);
  const float limit = static_cast<float>(ex.swiglu_limit);
  at::parallel_for(0, R, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) ClampedSwigluRow(&gu[r * 2 * F], F, limit, &act[r * F]);
  });
  PreparedRows pa;
  pa.Prepare(act.data(), R, F, kernel);
  std::vector<float> y(R * D);
  ProjectAll(ex.down, first, pa, D, kernel, y.data());

  // The gate-weighted sum, slot by slot (each product rounded, then added).
  at::parallel_for(0, N, 8, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      float* o = out + n * D;
      for (int64_t c = 0; c < D; ++c) o[c] = 0.0f;
      for (int64_t s = 0; s < top_k; ++s) {
        const float g = gates[n * top_k + s];
        const float* ys = &y[where[n * top_k + s] * D];
        for (int64_t c = 0; c < D; ++c) {
          const float t = g * ys[c];
          o[c] = o[c] + t;
        }
      }
    }
  });
}

}  // namespace pdserve
