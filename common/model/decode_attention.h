// Attention of one new token per sequence against its own cache (a decode
// step), fused: one pass over each sequence's K and V rows, all query heads
// of a KV head at once, the sink as one more logit. Replaces ~15 small ATen
// calls per sequence and layer, which dominate a batched step's overhead.
//
// No ATen here (compiled for AVX2+FMA, like gemv_kernels.cc): the caller
// passes raw pointers and runs the (sequence, KV head) pairs in parallel.
#pragma once

#include <cstdint>

namespace pdserve {

// One sequence's cache rows for one layer: k and v are [S, K, d], row-major,
// fp32 or bf16 (raw uint16). Row order does not matter: one query attends to
// every row it is given (the ring of a windowed layer holds exactly the
// window).
struct DecodeAttnRows {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t rows = 0;
};

struct DecodeAttnShape {
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // K; query head h reads KV head h / (H / K)
  int64_t head_dim = 0;    // d
  bool bf16 = false;       // K/V element type
};

// For query heads [kv_head * rep, (kv_head + 1) * rep) of one sequence:
// out[h * d + i] = sum_j softmax([q_h . k_j / sqrt(d)]_j ++ [sink_h])_j v_j[i].
// q: [H, d] fp32; sinks: [H] fp32 (already clamped); out: [H * d] fp32.
// `scratch` holds at least rep * rows floats.
void DecodeAttentionHead(const float* q, const DecodeAttnRows& rows, const DecodeAttnShape& shape,
                         const float* sinks, int64_t kv_head, float* scratch, float* out);

}  // namespace pdserve
