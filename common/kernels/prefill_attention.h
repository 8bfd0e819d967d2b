// Attention of a prompt chunk against its keys, fused (flash attention on
// the CPU): scores, an online softmax with the sink, and the weighted values
// of one tile of keys at a time, never a T x S scores matrix in memory. A
// block's query vectors are the lanes (scores kept [key][vector]), so the
// softmax needs no horizontal reduction per tile; scores are in base 2.
//   - PrefillAttnKeyLayout: where a segment's keys go in the kernel's
//     buffers (tiles aligned to absolute positions);
//   - PrefillAttentionBlock: kPrefillQueryRows query rows x the heads of one
//     KV head, against every key tile their mask can allow (the causal lower
//     tiles, or the window's band), written to `out`;
// The caller (attention.cc) fills the buffers and runs the (block, KV head)
// pairs in parallel; no ATen here.
//
// Bits: a query row's result depends only on its own position, its keys and
// the tile grid, which is fixed by absolute key position. Tiles a row may not
// see are skipped, masked entries weigh exactly 0, and each row's sums run
// in one order. So a row gives the same bits whatever block, batch or chunk
// it is computed in: a prompt prefilled in chunks equals it prefilled whole.
// The two ISA builds (AVX2 + FMA, AVX-512F) do the same operations in the
// same order lane by lane: they give the same bits.
#pragma once

#include <cstdint>

#include "common/kernels/decode_attention.h"

namespace pdserve {

// Keys per tile; tiles start at absolute positions that are multiples of it.
inline constexpr int64_t kPrefillKeyTile = 64;
// Query rows per block (times the GQA group's heads: the vectors of a block,
// 64 for 2 query heads per KV head: each key tile read from memory serves 64).
inline constexpr int64_t kPrefillQueryRows = 64;
// The most query heads per KV head the kernel takes.
inline constexpr int64_t kPrefillMaxGroup = 16;

// A segment's keys in the kernel's layout: fp32, padded to whole tiles with
// zeros. Key slot i holds position first_pos + i.
struct PrefillAttnKeys {
  const float* kt = nullptr;  // [K, slots / kPrefillKeyTile, d, kPrefillKeyTile]: each tile's keys,
                              // transposed and contiguous (no cache-set conflicts between rows)
  const float* v = nullptr;   // [K, slots, d]
  int64_t slots = 0;          // a multiple of kPrefillKeyTile
  int64_t first_pos = 0;      // a multiple of kPrefillKeyTile
  int64_t pos_begin = 0;      // the real keys: positions [pos_begin, pos_end)
  int64_t pos_end = 0;
};

// Where S keys starting at position k_start go: first_pos, slots, and the
// slot of the first key (k_start - first_pos). k_start >= 0.
struct PrefillAttnKeyLayout {
  int64_t first_pos = 0, slots = 0, offset = 0;
  PrefillAttnKeyLayout(int64_t k_start, int64_t S);
};

// The query rows: q [T, H, d] fp32, row t at position first_pos + t; a key
// is allowed iff pos_begin <= key <= query and, window > 0, query - key < window.
struct PrefillAttnQueries {
  const float* q = nullptr;
  int64_t rows = 0;
  int64_t first_pos = 0;
  int64_t window = 0;
};

inline int64_t PrefillAttnBlocks(int64_t rows) { return (rows + kPrefillQueryRows - 1) / kPrefillQueryRows; }

// True when the fused kernel takes this shape: the CPU has AVX2 + FMA, d is
// a multiple of 16, and H a multiple of K by at most kPrefillMaxGroup.
bool PrefillAttnSupported(const DecodeAttnShape& shape);

// Floats of scratch one PrefillAttentionBlock call needs.
int64_t PrefillAttnScratchFloats(const DecodeAttnShape& shape);

// Rows [block * kPrefillQueryRows, +kPrefillQueryRows) of `out` [T, H * d]
// for the query heads of KV head `kv_head`. A row with no allowed key gets
// zeros (the sink takes all the weight). shape.bf16 is ignored (keys are
// fp32 in the layout). Needs PrefillAttnSupported(shape).
void PrefillAttentionBlock(const PrefillAttnQueries& q, const PrefillAttnKeys& keys, const DecodeAttnShape& shape,
                           const float* sinks, int64_t block, int64_t kv_head, float* scratch, float* out,
                           DecodeAttnIsa isa);

}  // namespace pdserve
