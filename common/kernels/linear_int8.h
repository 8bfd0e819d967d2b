// Int8 weights in the Q8_0 layout (gemv_q8.h): quantization at load, the
// matmul, and the embedding gather.
//
// A quantized weight is an at::Tensor of dtype int8 (kChar) whose last
// dimension is Q8RowBytes(K) instead of K: every leading dimension (rows,
// experts) is unchanged, so cat/narrow/select over rows work as for fp
// weights. Any int8 tensor given to these functions is taken to be Q8_0.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace pdserve {

// True for a Q8_0 weight (dtype int8).
bool IsQ8(const at::Tensor& w);

// Whether a weight of last dimension K can be quantized (K % 32 == 0).
bool Q8Quantizable(int64_t K);

// w (fp32/bf16/f16, last dim K, Q8Quantizable) quantized per block of 32
// along K: d = max|w| / 127 rounded to fp16, q = round(w / d) clamped to
// [-127, 127]. Returns the int8 tensor described above.
at::Tensor QuantizeQ8(const at::Tensor& w);

// The fp32 values d * q of a Q8_0 tensor, shape [..., K].
at::Tensor DequantizeQ8(const at::Tensor& q);

// The kernel of LinearQ8 (gemv_q8.h, gemv_q8_kmajor.h): kFma (x stays fp32:
// only the weights are quantized) or kDot (x quantized per block of 32 too,
// as llama.cpp's Q8_0 x Q8_0; prefill then rounds x the same way, so decode
// and prefill agree with either). kDefault is the process-wide choice
// (SetQ8Kernel, --q8-kernel), else PDSERVE_Q8_KERNEL=dot|fma (read once),
// else auto: kDot where the CPU has AVX2 + FMA + F16C (GemvQ8Available),
// reading k-major packs (gemv_q8_kmajor.h) in the build GemvQ8DotIsa picks:
// with AVX-512 VNNI 2.7-2.9x llama.cpp's Q8_0 at 16 sequences, where FMA
// reaches 1.2-1.4x; with AVX2 alone 1.7-1.9x, where FMA reaches 1.3-1.4x;
// batch 1 the same or better), kFma elsewhere. Measured in
// docs/benchmarks.md §7 (and side by side in §2).
enum class Q8Kernel { kDefault, kDot, kFma };
// "auto" (kDefault), "dot" or "fma"; InvalidArgument otherwise.
absl::StatusOr<Q8Kernel> ParseQ8Kernel(const std::string& name);
const char* Q8KernelName(Q8Kernel kernel);
// Sets what kDefault means from now on (kDefault: auto). Call before a
// model loads: its k-major packs follow (Q8PacksKMajor).
void SetQ8Kernel(Q8Kernel kernel);
// Whether `kernel` is the dot kernel (kDefault resolved as above).
bool Q8KernelIsDot(Q8Kernel kernel = Q8Kernel::kDefault);

// Whether a model loaded now packs its Q8_0 matrices k-major in place of
// their rows (kmajor_packs.h, gemv_q8_kmajor.h): under the dot kernel
// (kDefault) where the CPU has AVX2 + FMA + F16C (either build of the
// pack's kernel), unless PDSERVE_Q8_KMAJOR=0 (read once; for
// same-machine comparisons with the row layout). The pack's
// kernel takes x quantized, as the dot kernel does, with the same products
// summed in another order.
bool Q8PacksKMajor();

// x W^T in fp32 for a 2-D Q8_0 weight W [N, Q8RowBytes(K)]; x [M, K] fp32.
// Up to kGemvMaxBatchRows rows use `kernel` (AVX2+FMA+F16C CPUs); more rows (prefill) widen W
// to fp32 once per call and use BLAS. Where W has a k-major pack in scope
// (CurrentKMajorPacks, kmajor_packs.h), any number of rows goes through the
// pack's dot kernel (GemvQ8KMajorDot) whatever `kernel` says: no widening,
// and a row's bits do not depend on the rows beside it, in prefill too.
at::Tensor LinearQ8(const at::Tensor& x, const at::Tensor& w, Q8Kernel kernel = Q8Kernel::kDefault);

// Rows `ids` of a Q8_0 embedding [V, Q8RowBytes(D)], as fp32 [N, D]; from
// its k-major pack where one is in scope, as LinearQ8 reads it.
at::Tensor EmbedRowsQ8(const at::Tensor& embed, const at::Tensor& ids);

}  // namespace pdserve
