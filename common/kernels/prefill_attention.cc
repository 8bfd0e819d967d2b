#include "common/kernels/prefill_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "common/kernels/attention_isa.h"

namespace pdserve {
namespace {

#define PDSERVE_ATTENTION_KERNEL "common/kernels/prefill_attention_kernel.inc"
#include "common/kernels/attention_isa_builds.inc"
#undef PDSERVE_ATTENTION_KERNEL

}  // namespace

PrefillAttnKeyLayout::PrefillAttnKeyLayout(int64_t k_start, int64_t S)
    : first_pos(k_start / kPrefillKeyTile * kPrefillKeyTile),
      slots((k_start - first_pos + S + kPrefillKeyTile - 1) / kPrefillKeyTile * kPrefillKeyTile),
      offset(k_start - first_pos) {}

bool PrefillAttnSupported(const DecodeAttnShape& s) {
  return DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx2) && s.head_dim > 0 && s.head_dim % 16 == 0 &&
         s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 && s.n_heads / s.n_kv_heads <= kPrefillMaxGroup;
}

int64_t PrefillAttnScratchFloats(const DecodeAttnShape& s) {
  // The kernel's Scratch: qt and o (d each), st (a tile), m, l, lo, hi and
  // alpha per vector, for the block's vectors rounded up to 16 lanes.
  const int64_t np = (kPrefillQueryRows * (s.n_heads / s.n_kv_heads) + 15) / 16 * 16;
  return np * (2 * s.head_dim + kPrefillKeyTile + 5);
}

void PrefillAttentionBlock(const PrefillAttnQueries& q, const PrefillAttnKeys& keys, const DecodeAttnShape& shape,
                           const float* sinks, int64_t block, int64_t kv_head, float* scratch, float* out,
                           DecodeAttnIsa isa) {
  if (isa == DecodeAttnIsa::kAvx512) {
    isa_avx512::Block(q, keys, shape, sinks, block, kv_head, scratch, out);
  } else {
    isa_avx2::Block(q, keys, shape, sinks, block, kv_head, scratch, out);
  }
}

}  // namespace pdserve
