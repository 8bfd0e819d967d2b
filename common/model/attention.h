// Attention with sinks, GQA and an optional sliding window (docs/model.md,
// "Attention"). Pure tensor functions, differentiable.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "common/kernels/prefill_attention.h"

namespace pdserve {

// Boolean [T, S] mask of allowed keys: query t sits at q_start + t, key s at
// k_start + s; allowed iff key <= query and, when window > 0, query - key <
// window. Returns an undefined tensor when every key is allowed.
at::Tensor AttentionMask(int64_t q_start, int64_t T, int64_t k_start, int64_t S, int64_t window);

// q [T, H, d], k/v [S, K, d] (fp32 or bf16; computed in fp32), sinks [H] (already
// clamped), mask [T, S] or undefined. Query head h reads KV head h / (H/K)
// without materialising repeated K/V. Returns [T, H*d] fp32.
at::Tensor AttendWithSinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& sinks, const at::Tensor& mask);

// AttendWithSinks(q, k, v, sinks, AttentionMask(q_start, T, k_start, S,
// window)) computed by query blocks of `block` rows: each block attends only
// to the keys its mask can allow ([first query - window + 1, last query]),
// so a windowed layer computes the W-wide band and a causal one skips the
// upper blocks, never the full T x S square. Same softmax (with the sink)
// per row; keys outside a block's range carry zero weight in the full form,
// so only the summation order of the products can differ. Keys must be in
// position order (k_start + s). Without autograd, and where the fused
// kernel takes the shape (PrefillAttnSupported), it runs the fused kernel
// (prefill_attention.h: its own blocks and key tiles, `block` unused);
// otherwise ATen per block, differentiable, and without autograd each
// block's softmax in place on one scores buffer (same math).
inline constexpr int64_t kAttentionBlockRows = 128;

// A segment's K and V [S, K, d] (any float dtype), keys from position
// k_start, in the fused prefill kernel's layout: `keys` points into the
// fp32 buffers `kt` and `v`, which own them. At most three arrays of that
// size live at once while it is built (the memory estimate counts them).
struct PrefillAttnKeyTensors {
  at::Tensor kt, v;
  PrefillAttnKeys keys;
};
PrefillAttnKeyTensors LayOutPrefillKeys(const at::Tensor& k, const at::Tensor& v, int64_t k_start);
at::Tensor BlockedAttendWithSinks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& sinks, int64_t q_start, int64_t k_start, int64_t window,
                                  int64_t block = kAttentionBlockRows);

}  // namespace pdserve
