#include "common/model/prefill_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "common/model/attention_isa.h"

namespace pdserve {
namespace {

namespace isa_avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,fma")

using attention_isa::avx2::Exp;
using attention_isa::avx2::Vec;

#include "common/model/prefill_attention_kernel.inc"

#pragma GCC pop_options
}  // namespace isa_avx2

namespace isa_avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*: false positives.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

using attention_isa::avx512::Exp;
using attention_isa::avx512::Vec;

#include "common/model/prefill_attention_kernel.inc"

#pragma GCC diagnostic pop
#pragma GCC pop_options
}  // namespace isa_avx512

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
  const int64_t n = kPrefillQueryRows * (s.n_heads / s.n_kv_heads);
  return n * (kPrefillKeyTile + s.head_dim + 2);
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
