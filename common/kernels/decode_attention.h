// Attention of one new token per sequence against its own cache (a decode
// step), fused and split along the sequence (flash-decoding):
//   - DecodeAttnSplits: how many splits of kDecodeSplitRows rows a
//     sequence's rows fall into (from its length alone, so a sequence's
//     result does not depend on which others share its batch);
//   - DecodeAttentionSplit: one split of one sequence, every head: scores,
//     their max, the sum of exp, and the unnormalized weighted values of its
//     rows, each K/V row read whole and once from memory;
//   - DecodeAttentionMerge: the splits of one sequence, merged in split
//     order with the sink as one more logit;
//   - DecodeAttention: both, for one sequence (tests, callers that do not
//     split).
// K/V are read in their stored type (bf16 widened in registers only).
//
// No ATen here: the caller passes raw pointers and runs the (sequence,
// split) pairs in parallel. The kernels are compiled twice, for AVX2+FMA
// (the baseline) and AVX-512F, and the widest the CPU has is chosen at run
// time (PDSERVE_ISA=avx2 forces the baseline, as for the gemv kernels).
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

enum class DecodeAttnIsa { kAvx2, kAvx512 };

// True when the CPU (and OS) can run `isa`'s kernels.
bool DecodeAttnIsaAvailable(DecodeAttnIsa isa);
// The kernels the plain entry points run: the widest available, unless
// PDSERVE_ISA=avx2 (cpu_features.h). Needs AVX2+FMA (GemvAvailable) at least.
DecodeAttnIsa DecodeAttnDefaultIsa();
const char* DecodeAttnIsaName(DecodeAttnIsa isa);

// Rows per split. Fixed, so split boundaries depend on a sequence's length only.
inline constexpr int64_t kDecodeSplitRows = 128;

inline int64_t DecodeAttnSplits(int64_t rows) { return (rows + kDecodeSplitRows - 1) / kDecodeSplitRows; }

// Floats one (sequence, split) partial takes: H * (d + 2).
inline int64_t DecodeAttnPartialFloats(const DecodeAttnShape& s) { return s.n_heads * (s.head_dim + 2); }
// Floats of scratch a split needs: H * (kDecodeSplitRows + d) (scores, and
// the query reordered for bf16 rows).
inline int64_t DecodeAttnScratchFloats(const DecodeAttnShape& s) {
  return s.n_heads * (kDecodeSplitRows + s.head_dim);
}

// Rows [split * kDecodeSplitRows, +kDecodeSplitRows) of one sequence, all
// heads (each K/V row is read whole, in order). q: [H, d] fp32. partial: per
// query head h, [max_j s_j, sum_j exp(s_j - max), sum_j exp(s_j - max) v_j (d)],
// s_j = q_h . k_j / sqrt(d), k_j and v_j of KV head h / (H / K).
// prefetch_next: the caller runs split + 1 of these rows next, on this
// thread; its K rows are then prefetched into L2 while this split computes
// its weighted values (the result is the same either way).
void DecodeAttentionSplit(const float* q, const DecodeAttnRows& rows, const DecodeAttnShape& shape, int64_t split,
                          float* scratch, float* partial, DecodeAttnIsa isa = DecodeAttnDefaultIsa(),
                          bool prefetch_next = false);

// out[h * d + i] from `n_splits` partials of one sequence (consecutive,
// DecodeAttnPartialFloats apart), merged in split order: the softmax over
// all rows' scores ++ [sink_h] applied to the values. sinks: [H] fp32
// (clamped); out: [H * d] fp32. Zero splits (no rows) give zeros.
void DecodeAttentionMerge(const float* partials, int64_t n_splits, const DecodeAttnShape& shape,
                          const float* sinks, float* out);

// Split and merge for one sequence, serially. `scratch` holds at least
// DecodeAttnScratchFloats + DecodeAttnSplits(rows) * DecodeAttnPartialFloats floats.
void DecodeAttention(const float* q, const DecodeAttnRows& rows, const DecodeAttnShape& shape, const float* sinks,
                     float* scratch, float* out, DecodeAttnIsa isa = DecodeAttnDefaultIsa());

}  // namespace pdserve
