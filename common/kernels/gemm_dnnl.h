// fp32 GEMMs for prefill-sized inputs through oneDNN's matmul primitive
// (the library LibTorch already links): brgemm kernels that oneDNN picks at
// run time from the CPU's flags (AVX-512, AVX2).
//   LinearF32          fp32 x W^T for any M: LinearF32Dnnl without autograd,
//                      else (autograd, PDSERVE_F32_GEMM=openblas, a shape
//                      oneDNN refuses) at::linear, which is OpenBLAS
//   LinearF32Dnnl      y [M, N] = x [M, K] W^T for fp32 x and W ([N, K], rows
//                      contiguous): W's packed copy where one is in scope,
//                      else W read in place (no copy per call); an undefined
//                      tensor when oneDNN refuses the shape or fails
//   LinearBf16WidenedDnnl  the same for bf16 W: its widened pack where one
//                      is in scope, else widened exactly to fp32 and packed
//                      in one pass (a oneDNN reorder into a buffer per
//                      thread), then the packed GEMM; undefined likewise
//   LinearKMajorDnnl   the same for bf16 W given by its k-major pack
//                      (gemv_kmajor.h): widened and packed in one reorder
//                      where oneDNN's layout is N-blocks of whole groups,
//                      k-major within (BA16a64b); undefined otherwise
//   F32GemmUsesDnnl    whether LinearF32 calls oneDNN: yes unless
//                      PDSERVE_F32_GEMM=openblas (read once; for A/B runs)
//   DnnlGemmMayServe   F32GemmUsesDnnl and no autograd through x or w: the
//                      callers' test before trying the *Dnnl functions
//   PackedF32Bytes     bytes of fp32 W [N, K] in the layout oneDNN's kernel
//                      prefers on this CPU (what a pack, or the widening
//                      buffer, holds); 4 N K where there is none (memory
//                      estimates)
//   DnnlGemmBuilt      whether this build has oneDNN (libdnnl-dev; the GPU
//                      image's CUDA LibTorch build has not: everything here
//                      then refuses, and LinearF32 is at::linear)
//   PackedF32Weights   fp32 copies of weights in the blocked layout oneDNN's
//                      kernels read (BA16a64b with AVX-512), made at load
//                      (--f32-packed-weights): for fp32 W ~10% faster GEMMs
//                      than W in place (~20% than OpenBLAS) at 128-512 rows
//                      on AVX-512, for as many bytes again as the weights;
//                      for bf16 W (widened exactly) no widening per call,
//                      for twice the bytes of the bf16 weights
//   ScopedPackedF32    puts one model's packs in scope for the calling
//                      thread (Transformer::Forward)
//   SetPackF32Weights / PackF32Weights   the process-wide choice
//
// Bits: a row's sum order depends on M (oneDNN blocks by M as OpenBLAS
// does) and on packing, so, as with at::linear, rows are exact against
// B = 1 only through the row kernels of 32 rows or fewer (gemv_tiles.h).
// Runs are repeatable: the same M gives the same bits. One primitive per
// (M rounded up to 8, K, N, W's layout) is created on first use (~0.5 ms)
// and kept in a per-thread cache.
#pragma once

#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "common/util/thread_scope.h"

namespace pdserve {

at::Tensor LinearF32(const at::Tensor& x, const at::Tensor& w);

at::Tensor LinearF32Dnnl(const at::Tensor& x, const at::Tensor& w);

at::Tensor LinearBf16WidenedDnnl(const at::Tensor& x, const at::Tensor& w);
// x [M, K] fp32; P the pack of W [N, K] in groups of `group` outputs.
at::Tensor LinearKMajorDnnl(const at::Tensor& x, const uint16_t* P, int64_t N, int64_t K, int64_t group);

bool F32GemmUsesDnnl();

bool DnnlGemmMayServe(const at::Tensor& x, const at::Tensor& w);

int64_t PackedF32Bytes(int64_t N, int64_t K);

bool DnnlGemmBuilt();

class PackedF32Weights {
 public:
  PackedF32Weights();
  ~PackedF32Weights();
  PackedF32Weights(const PackedF32Weights&) = delete;
  PackedF32Weights& operator=(const PackedF32Weights&) = delete;

  // Packs fp32 or bf16 w ([N, K], rows contiguous; w must outlive this
  // object and keep its address) as fp32. False, and nothing kept, for
  // other dtypes and where oneDNN prefers W's own layout or refuses it
  // (e.g. a CPU without AVX2).
  bool Add(const at::Tensor& w);
  int64_t bytes() const;  // of every pack held
  int64_t count() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

using ScopedPackedF32 = ThreadScope<PackedF32Weights>;  // common/util/thread_scope.h

void SetPackF32Weights(bool on);
bool PackF32Weights();

}  // namespace pdserve
