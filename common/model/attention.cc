#include "common/model/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/kernels/decode_attention.h"

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

namespace {

// AttendWithSinks for inference: the same softmax with the sink logit, in
// place on one scores buffer (no concatenated sink column, no copy of the
// narrowed probabilities). k/v fp32. Not for autograd.
at::Tensor AttendWithSinksInPlace(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& sinks, const at::Tensor& mask) {
  const int64_t T = q.size(0), H = q.size(1), d = q.size(2);
  const int64_t S = k.size(0), K = k.size(1), rep = H / K;
  const at::Tensor qg = q.permute({1, 0, 2}).reshape({K, rep * T, d});
  at::Tensor scores = at::bmm(qg, k.permute({1, 2, 0}));  // [K, rep*T, S]
  scores.mul_(1.0 / std::sqrt(static_cast<double>(d)));
  at::Tensor s3 = scores.view({H, T, S});
  if (mask.defined()) s3.masked_fill_(mask.logical_not().unsqueeze(0), -INFINITY);
  const at::Tensor sink = sinks.to(at::kFloat).view({H, 1, 1});
  const at::Tensor m = at::maximum(std::get<0>(s3.max(2, /*keepdim=*/true)), sink);  // [H, T, 1]
  s3.sub_(m).exp_();
  s3.div_(s3.sum(2, /*keepdim=*/true).add_((sink - m).exp_()));
  at::Tensor out = at::bmm(scores, v.permute({1, 0, 2}));  // [K, rep*T, d]
  return out.view({H, T, d}).permute({1, 0, 2}).reshape({T, H * d});
}

// k or v [S, K, d] as fp32 [K, slots, d]: slots [offset, offset + S) hold
// it, the others zeros.
at::Tensor KeySlotsByHead(const at::Tensor& src, int64_t slots, int64_t offset) {
  const int64_t S = src.size(0);
  at::Tensor dst = at::empty({src.size(1), slots, src.size(2)}, at::kFloat);
  dst.narrow(1, 0, offset).zero_();
  dst.narrow(1, offset + S, slots - offset - S).zero_();
  dst.narrow(1, offset, S).copy_(src.permute({1, 0, 2}));
  return dst;
}

// BlockedAttendWithSinks through the fused kernel (prefill_attention.h):
// K/V laid out once, then the (query block, KV head) pairs in parallel,
// zigzag over the blocks so that each thread's share of a causal triangle
// is about even.
at::Tensor FusedAttendWithSinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& sinks, int64_t q_start, int64_t k_start, int64_t window,
                                const DecodeAttnShape& shape) {
  const int64_t T = q.size(0), H = shape.n_heads, K = shape.n_kv_heads, d = shape.head_dim;
  const PrefillAttnKeyTensors laid = LayOutPrefillKeys(k, v, k_start);
  const PrefillAttnKeys& ka = laid.keys;
  const at::Tensor qc = q.to(at::kFloat).contiguous(), sc = sinks.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({T, H * d}, at::kFloat);
  const PrefillAttnQueries qa{qc.data_ptr<float>(), T, q_start, window};
  const int64_t blocks = PrefillAttnBlocks(T);
  const DecodeAttnIsa isa = DecodeAttnDefaultIsa();
  const float* sinks_p = sc.data_ptr<float>();
  float* out_p = out.data_ptr<float>();
  at::parallel_for(0, blocks * K, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scratch(PrefillAttnScratchFloats(shape));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t z = i / K, block = z % 2 == 0 ? z / 2 : blocks - 1 - z / 2;
      PrefillAttentionBlock(qa, ka, shape, sinks_p, block, i % K, scratch.data(), out_p, isa);
    }
  });
  return out;
}

}  // namespace

PrefillAttnKeyTensors LayOutPrefillKeys(const at::Tensor& k, const at::Tensor& v, int64_t k_start) {
  const int64_t S = k.size(0), K = k.size(1), d = k.size(2);
  const PrefillAttnKeyLayout layout(k_start, S);
  const int64_t tiles = layout.slots / kPrefillKeyTile;
  PrefillAttnKeyTensors out;
  // V: [K, slots, d]; K: [K, tiles, d, tile] (each tile transposed and contiguous).
  out.v = KeySlotsByHead(v, layout.slots, layout.offset);
  out.kt =
      KeySlotsByHead(k, layout.slots, layout.offset).view({K, tiles, kPrefillKeyTile, d}).transpose(2, 3).contiguous();
  out.keys = {out.kt.data_ptr<float>(), out.v.data_ptr<float>(), layout.slots, layout.first_pos, k_start, k_start + S};
  return out;
}

at::Tensor BlockedAttendWithSinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& sinks, int64_t q_start, int64_t k_start, int64_t window,
                                  int64_t block) {
  const int64_t T = q.size(0), S = k.size(0);
  const bool grad = at::GradMode::is_enabled() &&
                    (q.requires_grad() || k.requires_grad() || v.requires_grad() || sinks.requires_grad());
  const DecodeAttnShape shape{q.size(1), k.size(1), q.size(2), false};
  if (!grad && T > 0 && S > 0 && k_start >= 0 && PrefillAttnSupported(shape)) {
    return FusedAttendWithSinks(q, k, v, sinks, q_start, k_start, window, shape);
  }
  // Widen bf16 K/V once, not once per block.
  const at::Tensor kf = k.scalar_type() == at::kFloat ? k : k.to(at::kFloat);
  const at::Tensor vf = v.scalar_type() == at::kFloat ? v : v.to(at::kFloat);
  std::vector<at::Tensor> outs;
  for (int64_t t0 = 0; t0 < T; t0 += block) {
    const int64_t bt = std::min(block, T - t0);
    const int64_t first = q_start + t0, last = first + bt - 1;  // absolute query positions
    const int64_t lo = window > 0 ? first - window + 1 : k_start;
    const int64_t s0 = std::clamp<int64_t>(lo - k_start, 0, S), s1 = std::clamp<int64_t>(last - k_start + 1, 0, S);
    if (s1 <= s0) {  // no key allowed: the sink takes all the weight
      outs.push_back(at::zeros({bt, q.size(1) * q.size(2)}, q.options().dtype(at::kFloat)));
      continue;
    }
    const at::Tensor mask = AttentionMask(first, bt, k_start + s0, s1 - s0, window);
    const at::Tensor qb = q.narrow(0, t0, bt), kb = kf.narrow(0, s0, s1 - s0), vb = vf.narrow(0, s0, s1 - s0);
    outs.push_back(grad ? AttendWithSinks(qb, kb, vb, sinks, mask) : AttendWithSinksInPlace(qb, kb, vb, sinks, mask));
  }
  return outs.size() == 1 ? outs[0] : at::cat(outs);
}

}  // namespace pdserve
