#include "common/model/gemv_matrix.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "common/model/bf16_matmul.h"
#include "common/model/gemv_bf16dot.h"
#include "common/model/gemv_kernels.h"
#include "common/model/gemv_tiles.h"

namespace pdserve {

GemvMatrix AsGemvMatrix(const at::Tensor& w, int64_t e) {
  const bool stacked = e >= 0;
  if (w.dim() != (stacked ? 3 : 2) || !w.is_contiguous() ||
      (w.scalar_type() != at::kFloat && w.scalar_type() != at::kBFloat16) || (stacked && e >= w.size(0))) {
    return {};
  }
  const int64_t rows = w.size(stacked ? 1 : 0), cols = w.size(stacked ? 2 : 1);
  const char* base = static_cast<const char*>(w.data_ptr());
  const int64_t offset = stacked ? e * rows * cols * static_cast<int64_t>(w.element_size()) : 0;
  return {base + offset, w.scalar_type() == at::kBFloat16, rows, cols};
}

void GemvRows(const float* x, int64_t M, const GemvMatrix& w, int64_t t0, int64_t t1, float* y, int64_t ldy) {
  if (w.bf16 && GetBf16Matmul() == Bf16Matmul::kDot) {  // opt-in: x rounded to bf16
    GemvBf16Dot(x, M, w.cols, static_cast<const uint16_t*>(w.data), t0, t1, y, ldy);
  } else if (w.bf16) {
    GemvBf16(x, M, w.cols, static_cast<const uint16_t*>(w.data), t0, t1, y, ldy);
  } else {
    GemvF32(x, M, w.cols, static_cast<const float*>(w.data), t0, t1, y, ldy);
  }
}

bool GemvRoundsX(const GemvMatrix& w) { return w.bf16 && GetBf16Matmul() == Bf16Matmul::kDot; }

void GemvAllRows(const float* x, const uint16_t* xb, int64_t M, const GemvMatrix& w, int64_t t0, int64_t t1,
                 float* y, int64_t ldy) {
  const int64_t tile = M <= kGemvMaxRows ? std::max<int64_t>(1, t1 - t0) : GemvTileRows(w.row_bytes());
  const int64_t ldxb = Bf16DotStride(w.cols);
  for (int64_t a = t0; a < t1; a += tile) {
    const int64_t b = std::min(t1, a + tile);
    for (int64_t m = 0; m < M; m += kGemvMaxRows) {
      const int64_t rows = std::min(kGemvMaxRows, M - m);
      if (xb != nullptr) {
        GemvBf16DotRounded(xb + m * ldxb, rows, w.cols, static_cast<const uint16_t*>(w.data), a, b, y + m * ldy, ldy);
      } else {
        GemvRows(x + m * w.cols, rows, w, a, b, y + m * ldy, ldy);
      }
    }
  }
}

}  // namespace pdserve
