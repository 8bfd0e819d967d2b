#include "common/kernels/decode_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/kernels/attention_isa.h"
#include "common/kernels/avx2_util.h"
#include "common/util/cpu_features.h"

namespace pdserve {
namespace {

#define PDSERVE_ATTENTION_KERNEL "common/kernels/decode_attention_kernel.inc"
#include "common/kernels/attention_isa_builds.inc"
#undef PDSERVE_ATTENTION_KERNEL

}  // namespace

bool DecodeAttnIsaAvailable(DecodeAttnIsa isa) {
  const CpuFeatures& f = HostCpuFeatures();
  const bool avx2 = f.avx2 && f.fma;
  return isa == DecodeAttnIsa::kAvx512 ? avx2 && f.avx512f : avx2;
}

DecodeAttnIsa DecodeAttnDefaultIsa() {
  // One knob for every kernel family: PDSERVE_ISA (cpu_features.h).
  static const DecodeAttnIsa isa = [] {
    const absl::StatusOr<Isa> host = HostIsa();
    const bool forced_avx2 = host.ok() && *host == Isa::kAvx2;
    return !forced_avx2 && DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512) ? DecodeAttnIsa::kAvx512
                                                                          : DecodeAttnIsa::kAvx2;
  }();
  return isa;
}

const char* DecodeAttnIsaName(DecodeAttnIsa isa) { return isa == DecodeAttnIsa::kAvx512 ? "avx512" : "avx2"; }

void DecodeAttentionSplit(const float* q, const DecodeAttnRows& rows, const DecodeAttnShape& shape, int64_t split,
                          float* scratch, float* partial, DecodeAttnIsa isa, bool prefetch_next) {
  if (isa == DecodeAttnIsa::kAvx512) {
    isa_avx512::SplitAny(q, rows, shape, split, scratch, partial, prefetch_next);
  } else {
    isa_avx2::SplitAny(q, rows, shape, split, scratch, partial, prefetch_next);
  }
}

void DecodeAttentionMerge(const float* partials, int64_t n_splits, const DecodeAttnShape& shape,
                          const float* sinks, float* out) {
  const int64_t d = shape.head_dim, stride = DecodeAttnPartialFloats(shape);
  for (int64_t h = 0; h < shape.n_heads; ++h) {
    const float* first = partials + h * (d + 2);
    float m = sinks[h];
    for (int64_t c = 0; c < n_splits; ++c) m = std::max(m, first[c * stride]);
    double total = std::exp(static_cast<double>(sinks[h] - m));
    float* o = out + h * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t c = 0; c < n_splits; ++c) {
      const float* part = first + c * stride;
      const float w = std::exp(part[0] - m);
      total += static_cast<double>(w) * part[1];
      for (int64_t i = 0; i < d; ++i) o[i] += w * part[2 + i];
    }
    const float inv = static_cast<float>(1.0 / total);
    for (int64_t i = 0; i < d; ++i) o[i] *= inv;
  }
}

void DecodeAttention(const float* q, const DecodeAttnRows& rows, const DecodeAttnShape& shape, const float* sinks,
                     float* scratch, float* out, DecodeAttnIsa isa) {
  const int64_t n = DecodeAttnSplits(rows.rows), pf = DecodeAttnPartialFloats(shape);
  float* partials = scratch + DecodeAttnScratchFloats(shape);
  for (int64_t c = 0; c < n; ++c) DecodeAttentionSplit(q, rows, shape, c, scratch, partials + c * pf, isa, c + 1 < n);
  DecodeAttentionMerge(partials, n, shape, sinks, out);
}

}  // namespace pdserve
