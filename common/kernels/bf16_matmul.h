// GEMMs with bf16 weights for prefill-sized inputs (more rows of x than the
// GEMV kernels take), paths chosen at run time (the AMX ones where the CPU
// runs the amx ISA, common/util/cpu_features.h):
//   Bf16Matmul         kWiden (exact), kAmxSplit (exact, AMX), kAmx or kDot
//                      (both opt-in: they round activations to bf16)
//   ParseBf16Matmul    "widen" | "split" | "amx" | "dot" | "kmajor" | "auto"
//   DefaultBf16Matmul  what "auto" picks: split where HostIsa() is amx, else
//                      kmajor where the decode kernels run AVX-512
//                      (GemvDefaultIsa()), else widen; the process default
//                      until SetBf16Matmul
//   SetBf16Matmul      process-wide choice; an AMX path without AMX is refused
//   LinearBf16         x W^T through the chosen path
//   LinearBf16Widened  W widened to fp32 into a per-thread buffer, fp32
//                      GEMM: bf16 weights act as their exact fp32 values
//   LinearBf16Split    x split into three bf16 terms on AMX tiles with fp32
//                      accumulation (gemm_amx.h): fp32-GEMM accuracy; shapes
//                      the kernel does not take go to LinearBf16Widened
//   LinearBf16Amx      x rounded to bf16, bf16 x bf16 GEMM with fp32
//                      accumulation through LibTorch's oneDNN (AMX tiles on
//                      AMX CPUs), output rounded to bf16 and widened: about
//                      3 significant digits per output, so it changes
//                      numerics and is opt-in.
//   LinearBf16Dot      x rounded to bf16, vdpbf16ps with fp32 accumulation
//                      and fp32 output (gemv_bf16dot.h), for every size of
//                      x: the one choice that also changes decode (Linear
//                      sends decode rows of bf16 weights to the same kernel,
//                      so a row's bits do not depend on prefill or decode).
//                      Needs AVX512_BF16; opt-in like amx, for the speed of
//                      llama.cpp's BF16 path on CPUs without AMX. A model
//                      loaded under kDot packs its matrices k-major as
//                      kKMajor does, and every row goes to the packed dot
//                      kernel (GemvBf16KMajorDot) instead; a model loaded
//                      under another mode and switched to kDot after load
//                      keeps the row layout's kernel.
//   PacksKMajor        kKMajor and kDot: the modes under which a model
//                      packs its bf16 matrices k-major at load
//   kKMajor            each bf16 matrix packed k-major at load in place of
//                      its row-major copy (kmajor_packs.h, gemv_kmajor.h);
//                      decode rows (Linear's up to kGemvMaxBatchRows) read
//                      the packs: exact products, one FMA chain per output,
//                      batch invariant; prefill widens them exactly
//                      (LinearBf16KMajorWidened)
//   LinearBf16KMajorWidened  W widened from its k-major pack to fp32 W^T
//                      in a per-thread buffer, then the fp32 GEMM
#pragma once

#include <cstdint>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve {

enum class Bf16Matmul { kWiden, kAmx, kAmxSplit, kDot, kKMajor };

// InvalidArgument for an unknown name. "auto" is DefaultBf16Matmul();
// "amx" or "split" on a CPU without AMX, or "dot" without AVX512_BF16, is
// FailedPrecondition.
absl::StatusOr<Bf16Matmul> ParseBf16Matmul(std::string_view name);
Bf16Matmul DefaultBf16Matmul();
bool PacksKMajor(Bf16Matmul mode);
const char* Bf16MatmulName(Bf16Matmul mode);  // "widen", "split", "amx", "dot"

// FailedPrecondition (naming the missing feature) for kAmx or kAmxSplit
// without AMX, kDot without AVX512_BF16.
absl::Status SetBf16Matmul(Bf16Matmul mode);
Bf16Matmul GetBf16Matmul();

// Elements of W (64 MB in fp32) up to which the widening paths keep their
// fp32 buffer per thread between calls; a larger W (the head) gets a
// temporary.
inline constexpr int64_t kMaxWidenBuffered = int64_t{16} << 20;

// x [M, K] fp32, w [N, K] bf16 -> [M, N] fp32.
at::Tensor LinearBf16(const at::Tensor& x, const at::Tensor& w);
at::Tensor LinearBf16Widened(const at::Tensor& x, const at::Tensor& w);
at::Tensor LinearBf16Amx(const at::Tensor& x, const at::Tensor& w);
// Call only where GemvBf16DotAvailable() (gemv_bf16dot.h).
at::Tensor LinearBf16Dot(const at::Tensor& x, const at::Tensor& w);
// W [N, K] from its k-major pack P (gemv_kmajor.h): the same values as
// LinearBf16Widened's, W^T read in place by the GEMM.
at::Tensor LinearBf16KMajorWidened(const at::Tensor& x, const uint16_t* P, int64_t N, int64_t K);
// Call only where AmxSplitAvailable() (gemm_amx.h).
at::Tensor LinearBf16Split(const at::Tensor& x, const at::Tensor& w);

}  // namespace pdserve
