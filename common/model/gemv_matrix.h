// A weight matrix as the decode kernels read it, and the calls that feed
// it rows of x: shared by Linear and the MoE paths of the transformer. For
// ATen translation units only (AsGemvMatrix takes a tensor).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace pdserve {

// A weight matrix [rows, cols], fp32 or bf16 (raw uint16), row-major.
struct GemvMatrix {
  const void* data = nullptr;  // nullptr: not usable by the kernels
  bool bf16 = false;
  int64_t rows = 0, cols = 0;

  int64_t row_bytes() const { return cols * (bf16 ? 2 : 4); }
};

// w, or matrix e of a 3-D [E, rows, cols] stack (e >= 0), when it is fp32
// or bf16 and contiguous, without a tensor call per use; data == nullptr
// when it is not (int8 weights, a strided view).
GemvMatrix AsGemvMatrix(const at::Tensor& w, int64_t e = -1);

// Rows m < M (<= kGemvMaxRows) of x [M, w.cols] against weight rows
// [t0, t1): y[m * ldy + n]. The kernel is the one Linear uses for this
// matrix (fp32, exact bf16, or under --bf16-matmul dot x rounded to bf16),
// so each output has Linear's bits.
void GemvRows(const float* x, int64_t M, const GemvMatrix& w, int64_t t0, int64_t t1, float* y, int64_t ldy);

// Whether GemvRows rounds x to bf16 for w (--bf16-matmul dot, bf16 w): a
// caller that passes the same rows over many chunks rounds them once
// (RoundRowsToBf16, gemv_bf16dot.h) and hands them to GemvAllRows as xb.
bool GemvRoundsX(const GemvMatrix& w);

// Every row of x [M, w.cols] (any M) against weight rows [t0, t1), in
// groups of kGemvMaxRows; past kGemvMaxRows rows, tile by tile of
// GemvTileRows weight rows, so a tile stays in L2 while every group passes
// (ForEachGemvTile's order within one chunk). xb: x already rounded
// (stride Bf16DotStride(w.cols)) where GemvRoundsX(w), else nullptr. The
// same bits as GemvRows.
void GemvAllRows(const float* x, const uint16_t* xb, int64_t M, const GemvMatrix& w, int64_t t0, int64_t t1,
                 float* y, int64_t ldy);

}  // namespace pdserve
