#include "common/kernels/gemv_matrix.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "common/kernels/bf16_matmul.h"
#include "common/kernels/gemv_bf16dot.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_q8_kmajor.h"
#include "common/kernels/gemv_tiles.h"
#include "common/kernels/kmajor_packs.h"
#include "common/kernels/linear_int8.h"

namespace pdserve {

int64_t GemvMatrix::row_bytes() const { return q8 ? Q8RowBytes(cols) : cols * (bf16 ? 2 : 4); }

GemvMatrix AsGemvMatrix(const at::Tensor& w, int64_t e) {
  const bool stacked = e >= 0;
  const bool q8 = IsQ8(w);
  if (w.dim() != (stacked ? 3 : 2) || !w.is_contiguous() ||
      (w.scalar_type() != at::kFloat && w.scalar_type() != at::kBFloat16 && !q8) || (stacked && e >= w.size(0))) {
    return {};
  }
  const int64_t rows = w.size(stacked ? 1 : 0), last = w.size(stacked ? 2 : 1);
  const int64_t cols = q8 ? last / kQ8BlockBytes * kQ8Block : last;
  const char* base = static_cast<const char*>(w.data_ptr());
  const int64_t offset = stacked ? e * rows * last * static_cast<int64_t>(w.element_size()) : 0;
  const bool bf16 = w.scalar_type() == at::kBFloat16;
  GemvMatrix m{base + offset, bf16, q8, rows, cols};
  if (const KMajorPacks* packs = bf16 || q8 ? CurrentKMajorPacks() : nullptr; packs != nullptr) {
    if (bf16) m.kmajor = packs->Find(m.data, rows, cols);
    if (q8) m.q8_kmajor = packs->FindQ8(m.data, rows, cols);
  }
  return m;
}

GemvX GemvX::From(int64_t m, int64_t K) const {
  GemvX r = *this;
  r.x = x + m * K;
  if (bf16 != nullptr) r.bf16 = bf16 + m * Bf16DotStride(K);
  if (q8 != nullptr) {
    r.q8 = q8 + m * K;
    r.q8_scales = q8_scales + m * (K / kQ8Block);
  }
  return r;
}

GemvX PrepareGemvX(const GemvMatrix& w, const float* x, int64_t M, GemvXBuffer* buffer) {
  GemvX r{x};
  const int64_t K = w.cols;
  if (w.bf16 && GetBf16Matmul() == Bf16Matmul::kDot) {
    buffer->bf16.resize(M * Bf16DotStride(K));
    RoundRowsToBf16(x, M, K, buffer->bf16.data());
    r.bf16 = buffer->bf16.data();
  } else if (w.q8 && (Q8KernelIsDot() || w.q8_kmajor != nullptr)) {
    buffer->q8.resize(M * K);
    buffer->q8_scales.resize(M * (K / kQ8Block));
    QuantizeRowsQ8(x, M, K, buffer->q8.data(), buffer->q8_scales.data());
    r.q8 = buffer->q8.data();
    r.q8_scales = buffer->q8_scales.data();
  }
  return r;
}

namespace {

// The kernels that take x unrounded (fp32 and exact bf16 weights): under
// --bf16-matmul dot PrepareGemvX has rounded x, and GemvAllRows sends the
// rounded rows to the dot kernels instead. M <= kGemvMaxRows for the row
// layout, any M for a k-major w.
void GemvRows(const float* x, int64_t M, const GemvMatrix& w, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  if (w.kmajor != nullptr) {
    GemvBf16KMajor(x, M, w.cols, w.kmajor, w.rows, t0, t1, y, ldy);
  } else if (w.bf16) {
    GemvBf16(x, M, w.cols, static_cast<const uint16_t*>(w.data), t0, t1, y, ldy);
  } else {
    GemvF32(x, M, w.cols, static_cast<const float*>(w.data), t0, t1, y, ldy);
  }
}

}  // namespace

void GemvAllRows(const GemvX& x, int64_t M, const GemvMatrix& w, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  if (w.kmajor != nullptr && x.bf16 != nullptr) {
    return GemvBf16KMajorDotRounded(x.bf16, M, w.cols, w.kmajor, w.rows, t0, t1, y, ldy);
  }
  if (w.kmajor != nullptr) return GemvRows(x.x, M, w, t0, t1, y, ldy);
  if (w.q8_kmajor != nullptr) {  // PrepareGemvX quantized x for it
    return GemvQ8KMajorDot(x.q8, x.q8_scales, M, w.cols, w.q8_kmajor, w.rows, t0, t1, y, ldy);
  }
  const int64_t tile = M <= kGemvMaxRows ? std::max<int64_t>(1, t1 - t0) : GemvTileRows(w.row_bytes());
  const int64_t K = w.cols;
  const auto* wb = static_cast<const uint8_t*>(w.data);
  for (int64_t a = t0; a < t1; a += tile) {
    const int64_t b = std::min(t1, a + tile);
    for (int64_t m = 0; m < M; m += kGemvMaxRows) {
      const int64_t rows = std::min(kGemvMaxRows, M - m);
      const GemvX xm = x.From(m, K);
      float* ym = y + m * ldy;
      if (xm.bf16 != nullptr) {
        GemvBf16DotRounded(xm.bf16, rows, K, static_cast<const uint16_t*>(w.data), a, b, ym, ldy);
      } else if (w.q8 && xm.q8 != nullptr) {
        GemvQ8Dot(xm.q8, xm.q8_scales, rows, K, wb, a, b, ym, ldy);
      } else if (w.q8) {
        GemvQ8Fma(xm.x, rows, K, wb, a, b, ym, ldy);
      } else {
        GemvRows(xm.x, rows, w, a, b, ym, ldy);
      }
    }
  }
}

}  // namespace pdserve
