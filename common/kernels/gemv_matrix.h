// A weight matrix as the decode kernels read it, and the calls that feed
// it rows of x: shared by Linear and the MoE paths of the transformer. For
// ATen translation units only (AsGemvMatrix takes a tensor).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace pdserve {

// A weight matrix [rows, cols] (cols = K), row-major: fp32, bf16 (raw
// uint16) or Q8_0 (linear_int8.h: Q8RowBytes(cols) bytes a row); for bf16
// under --bf16-matmul kmajor or dot, and for Q8_0 where Q8PacksKMajor(),
// also its k-major pack (kmajor_packs.h), which the decode kernels then
// read instead.
struct GemvMatrix {
  const void* data = nullptr;  // nullptr: not usable by the kernels
  bool bf16 = false, q8 = false;
  int64_t rows = 0, cols = 0;
  const uint16_t* kmajor = nullptr;    // bf16: the pack (gemv_kmajor.h), or nullptr
  const uint8_t* q8_kmajor = nullptr;  // Q8_0: the pack (gemv_q8_kmajor.h), or nullptr

  int64_t row_bytes() const;
  // Whether the kernels read a k-major pack: they block every row of x
  // themselves, over whole groups of 32 outputs.
  bool packed() const { return kmajor != nullptr || q8_kmajor != nullptr; }
  // Whether x prepared for o (PrepareGemvX) serves this matrix too.
  bool same_kind(const GemvMatrix& o) const { return bf16 == o.bf16 && q8 == o.q8 && packed() == o.packed(); }
};

// w, or matrix e of a 3-D [E, rows, cols] stack (e >= 0), when it is fp32,
// bf16 or Q8_0 and contiguous, without a tensor call per use; data ==
// nullptr when it is not (a strided view, another dtype). A bf16 or Q8_0
// matrix gets its pack from the packs in scope on this thread
// (CurrentKMajorPacks).
GemvMatrix AsGemvMatrix(const at::Tensor& w, int64_t e = -1);

// Rows of x [M, K] as one kind of matrix's kernel reads them: fp32, and
// where that kernel rounds x (bf16 under --bf16-matmul dot, int8 under
// PDSERVE_Q8_KERNEL=dot or from a pack) the rounded rows, prepared once for
// many chunks.
struct GemvX {
  const float* x = nullptr;          // [M, K]
  const uint16_t* bf16 = nullptr;    // [M, Bf16DotStride(K)] (gemv_bf16dot.h), or nullptr
  const int8_t* q8 = nullptr;        // [M, K] quantized per block of 32 (gemv_q8.h), or nullptr
  const float* q8_scales = nullptr;  // [M, K / 32]

  // The same rows from row m on.
  GemvX From(int64_t m, int64_t K) const;
};

// Owns the rounded rows of a GemvX.
struct GemvXBuffer {
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q8;
  std::vector<float> q8_scales;
};

// x [M, K] prepared for the kernel of matrices of w's kind, into *buffer
// where that kernel rounds x.
GemvX PrepareGemvX(const GemvMatrix& w, const float* x, int64_t M, GemvXBuffer* buffer);

// Every row of x [M, w.cols] (any M; PrepareGemvX for w) against weight
// rows [t0, t1): a k-major w in one call (the kernel blocks the rows
// itself); else in groups of kGemvMaxRows, and past kGemvMaxRows rows, tile by
// tile of GemvTileRows weight rows, so a tile stays in L2 while every group
// passes (ForEachGemvTile's order within one chunk). The kernel is the one
// Linear uses for this matrix (fp32; exact bf16 from rows or from the
// k-major pack; under --bf16-matmul dot x rounded to bf16 by PrepareGemvX;
// LinearQ8's for Q8_0 weights, from the pack where there is one), so each
// output has Linear's bits.
void GemvAllRows(const GemvX& x, int64_t M, const GemvMatrix& w, int64_t t0, int64_t t1, float* y, int64_t ldy);

}  // namespace pdserve
