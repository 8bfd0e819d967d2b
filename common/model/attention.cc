#include "common/model/attention.h"

#include <ATen/ATen.h>

#include <cmath>

namespace pdserve {

at::Tensor AttentionMask(int64_t q_start, int64_t T, int64_t k_start, int64_t S, int64_t window) {
  const int64_t q_last = q_start + T - 1, k_last = k_start + S - 1;
  const bool causal_free = k_last <= q_start;
  const bool window_free = window <= 0 || q_last - k_start < window;
  if (causal_free && window_free) return at::Tensor();
  at::Tensor qpos = at::arange(q_start, q_start + T, at::kLong).unsqueeze(1);
  at::Tensor kpos = at::arange(k_start, k_start + S, at::kLong).unsqueeze(0);
  at::Tensor allowed = kpos <= qpos;
  if (window > 0) allowed = allowed.logical_and(qpos - kpos < window);
  return allowed;
}

at::Tensor AttendWithSinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& sinks, const at::Tensor& mask) {
  const int64_t T = q.size(0), H = q.size(1), d = q.size(2);
  const int64_t S = k.size(0), K = k.size(1), rep = H / K;
  at::Tensor kf = k.scalar_type() == at::kFloat ? k : k.to(at::kFloat);
  at::Tensor vf = v.scalar_type() == at::kFloat ? v : v.to(at::kFloat);
  // Group the query heads that share a KV head: [K, rep*T, d].
  at::Tensor qg = q.permute({1, 0, 2}).reshape({K, rep * T, d});
  at::Tensor scores = at::bmm(qg, kf.permute({1, 2, 0}));  // [K, rep*T, S]
  scores = scores.mul(1.0 / std::sqrt(static_cast<double>(d))).view({H, T, S});
  if (mask.defined()) scores = scores.masked_fill(mask.logical_not().unsqueeze(0), -INFINITY);
  // The sink is one more logit per head with no value vector.
  at::Tensor sink_col = sinks.view({H, 1, 1}).expand({H, T, 1});
  at::Tensor probs = at::softmax(at::cat({scores, sink_col}, 2), 2).narrow(2, 0, S);
  at::Tensor out = at::bmm(probs.reshape({K, rep * T, S}), vf.permute({1, 0, 2}));  // [K, rep*T, d]
  return out.view({H, T, d}).permute({1, 0, 2}).reshape({T, H * d});
}

}  // namespace pdserve
