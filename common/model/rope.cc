#include "common/model/rope.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

namespace pdserve {

Rope::Rope(const ModelConfig& c)
    : half_(c.head_dim / 2),
      identity_pairs_(c.rope_identity_pairs_global),
      mscale_(0.1 * std::log(c.yarn.factor) + 1.0),
      inv_freq_(half_) {
  const double d = static_cast<double>(c.head_dim);
  const double L0 = static_cast<double>(c.yarn.original_max_position);
  auto corr = [&](double r) { return d * std::log(L0 / (r * 2.0 * M_PI)) / (2.0 * std::log(c.rope_theta)); };
  // GPT-OSS-Lite rounds the correction range out to integers; gpt-oss
  // (truncate: false) keeps it fractional.
  const double lo_raw = corr(c.yarn.beta_fast), hi_raw = corr(c.yarn.beta_slow);
  const double low = std::max(c.yarn.truncate ? std::floor(lo_raw) : lo_raw, 0.0);
  double high = std::min(c.yarn.truncate ? std::ceil(hi_raw) : hi_raw, d - 1.0);
  if (high == low) high += 0.001;
  for (int64_t i = 0; i < half_; ++i) {
    const double base = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / d);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    inv_freq_[i] = base / c.yarn.factor * ramp + base * (1.0 - ramp);
  }
}

void Rope::Angles(int64_t pos, bool global, float* cos_out, float* sin_out) const {
  const double p = static_cast<double>(pos);
  for (int64_t i = 0; i < half_; ++i) {
    if (global && i < identity_pairs_) {
      cos_out[i] = 1.0f;
      sin_out[i] = 0.0f;
      continue;
    }
    const double a = p * inv_freq_[i];
    cos_out[i] = static_cast<float>(std::cos(a) * mscale_);
    sin_out[i] = static_cast<float>(std::sin(a) * mscale_);
  }
}

void Rope::ForPositions(const std::vector<int64_t>& positions, bool global, at::Tensor* cos,
                        at::Tensor* sin) const {
  const int64_t n = static_cast<int64_t>(positions.size());
  *cos = at::empty({n, half_}, at::kFloat);
  *sin = at::empty({n, half_}, at::kFloat);
  float* c = cos->data_ptr<float>();
  float* s = sin->data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) Angles(positions[r], global, c + r * half_, s + r * half_);
}

void Rope::Table(int64_t start, int64_t n, bool global, at::Tensor* cos, at::Tensor* sin) const {
  const int kind = global ? 1 : 0;
  at::Tensor tc, ts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t have = table_cos_[kind].defined() ? table_cos_[kind].size(0) : 0;
    if (start + n > have) {
      // Grow geometrically, at least 4096 rows, so decode-by-prefill is cheap.
      const int64_t rows = std::max({start + n, 2 * have, int64_t{4096}});
      std::vector<int64_t> pos(rows);
      for (int64_t i = 0; i < rows; ++i) pos[i] = i;
      // The table is built from the scalar path: the two agree bit for bit.
      ForPositions(pos, global, &table_cos_[kind], &table_sin_[kind]);
    }
    tc = table_cos_[kind];
    ts = table_sin_[kind];
  }
  *cos = tc.narrow(0, start, n);
  *sin = ts.narrow(0, start, n);
}

namespace {

// Apply's arithmetic in one pass, without the ~8 ATen calls and the cat:
// each output is the same two products and one sum or difference, rounded
// the same way (this file is built without FMA, so nothing fuses them).
at::Tensor ApplyFp32(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor xc = x.contiguous(), cc = cos.contiguous(), sc = sin.contiguous();
  const int64_t N = x.size(0), H = x.size(1), d = x.size(2), half = d / 2;
  at::Tensor out = at::empty({N, H, d}, at::kFloat);
  const float* xp = xc.data_ptr<float>();
  const float* cp = cc.data_ptr<float>();
  const float* sp = sc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, N * H, /*grain_size=*/256, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* c = cp + (r / H) * half;
      const float* s = sp + (r / H) * half;
      const float* x1 = xp + r * d;
      const float* x2 = x1 + half;
      float* o = op + r * d;
      for (int64_t i = 0; i < half; ++i) {
        const float a = x1[i] * c[i], b = x2[i] * s[i];
        const float e = x2[i] * c[i], f = x1[i] * s[i];
        o[i] = a - b;
        o[i + half] = e + f;
      }
    }
  });
  return out;
}

}  // namespace

at::Tensor Rope::Apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const bool grad = at::GradMode::is_enabled() && (x.requires_grad() || cos.requires_grad());
  if (!grad && x.dim() == 3 && x.size(-1) % 2 == 0 && x.scalar_type() == at::kFloat &&
      cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.dim() == 2 &&
      cos.size(0) == x.size(0) && cos.size(1) == half && sin.sizes() == cos.sizes()) {
    return ApplyFp32(x, cos, sin);
  }
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  at::Tensor c = cos.unsqueeze(1);  // [N, 1, half] broadcasts over heads
  at::Tensor s = sin.unsqueeze(1);
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

}  // namespace pdserve
