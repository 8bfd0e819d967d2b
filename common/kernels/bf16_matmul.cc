#include "common/kernels/bf16_matmul.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kernels/gemm_amx.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/kernels/gemv_bf16dot.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_tiles.h"
#include "common/util/cpu_features.h"

namespace pdserve {

namespace {

// AMX-BF16 with the OS's tile state and Linux's permission (cpu_features).
bool CpuHasAmxBf16() { return HostCpuFeatures().amx_bf16; }

// Why `mode` cannot run here, or "" where it can.
std::string MissingFeature(Bf16Matmul mode) {
  if (mode == Bf16Matmul::kAmx && !CpuHasAmxBf16()) return "this CPU (or kernel) has no AMX-BF16";
  if (mode == Bf16Matmul::kDot && !GemvBf16DotAvailable()) {
    return absl::StrCat("this CPU (or kernel, or PDSERVE_ISA) cannot run the bf16 dot kernel (it has: ",
                        CpuFeaturesString(HostCpuFeatures()), "; dot needs avx512f avx512bw avx512vl avx512_bf16)");
  }
  if (mode == Bf16Matmul::kAmxSplit && !AmxSplitAvailable()) {
    return absl::StrCat("this CPU (or kernel) cannot run the amx ISA (it has: ", CpuFeaturesString(HostCpuFeatures()),
                        "; split needs avx512f avx512bw avx512vl avx512_bf16 amx_tile amx_bf16)");
  }
  return "";
}

// -1 until SetBf16Matmul: DefaultBf16Matmul().
std::atomic<int> g_mode{-1};
}  // namespace

Bf16Matmul DefaultBf16Matmul() {
  static const Bf16Matmul mode = [] {
    const absl::StatusOr<Isa> isa = HostIsa();  // PDSERVE_ISA=avx2|avx512 keeps AMX off
    if (isa.ok() && *isa == Isa::kAmx && AmxSplitAvailable()) return Bf16Matmul::kAmxSplit;
    // k-major packs where their AVX-512 kernels run: exact products as
    // widen's, the same memory, faster decode. Not with AVX2 kernels only:
    // batch 1 lost up to ~28% there in one of three runs (docs/benchmarks.md §5).
    return GemvDefaultIsa() == GemvIsa::kAvx512 ? Bf16Matmul::kKMajor : Bf16Matmul::kWiden;
  }();
  return mode;
}

bool PacksKMajor(Bf16Matmul mode) { return mode == Bf16Matmul::kKMajor || mode == Bf16Matmul::kDot; }

const char* Bf16MatmulName(Bf16Matmul mode) {
  switch (mode) {
    case Bf16Matmul::kAmx: return "amx";
    case Bf16Matmul::kAmxSplit: return "split";
    case Bf16Matmul::kDot: return "dot";
    case Bf16Matmul::kKMajor: return "kmajor";
    default: return "widen";
  }
}

absl::StatusOr<Bf16Matmul> ParseBf16Matmul(std::string_view name) {
  if (name == "auto") return DefaultBf16Matmul();
  for (Bf16Matmul mode :
       {Bf16Matmul::kWiden, Bf16Matmul::kAmxSplit, Bf16Matmul::kAmx, Bf16Matmul::kDot, Bf16Matmul::kKMajor}) {
    if (name != Bf16MatmulName(mode)) continue;
    const std::string missing = MissingFeature(mode);
    if (!missing.empty()) return absl::FailedPreconditionError(missing);
    return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown bf16 matmul \"", std::string(name), "\" (widen, split, amx, dot, kmajor or auto)"));
}

absl::Status SetBf16Matmul(Bf16Matmul mode) {
  const std::string missing = MissingFeature(mode);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("bf16 matmul ", Bf16MatmulName(mode), ": ", missing));
  }
  g_mode.store(static_cast<int>(mode));
  return absl::OkStatus();
}

Bf16Matmul GetBf16Matmul() {
  const int mode = g_mode.load();
  return mode < 0 ? DefaultBf16Matmul() : static_cast<Bf16Matmul>(mode);
}

at::Tensor LinearBf16(const at::Tensor& x, const at::Tensor& w) {
  switch (GetBf16Matmul()) {
    case Bf16Matmul::kAmx: return LinearBf16Amx(x, w);
    case Bf16Matmul::kAmxSplit: return LinearBf16Split(x, w);
    case Bf16Matmul::kDot: return LinearBf16Dot(x, w);
    default: return LinearBf16Widened(x, w);  // kWiden, kKMajor
  }
}

at::Tensor LinearBf16Widened(const at::Tensor& x, const at::Tensor& w) {
  // A per-thread buffer: a fresh 10 MB tensor per call costs page faults
  // and zeroing on every prefill matmul (~9% of a bf16 prefill).
  if (w.numel() > kMaxWidenBuffered) return at::linear(x.to(at::kFloat), w.to(at::kFloat));
  // oneDNN: W widened and packed in one pass into its per-thread buffer,
  // then its GEMM (gemm_dnnl.h); the same bits as LinearF32 on W's fp32 values.
  if (DnnlGemmMayServe(x, w)) {
    if (at::Tensor y = LinearBf16WidenedDnnl(x.to(at::kFloat), w); y.defined()) return y;
  }
  thread_local at::Tensor buffer;
  if (!buffer.defined() || buffer.numel() < w.numel()) buffer = at::empty({w.numel()}, at::kFloat);
  at::Tensor wf = buffer.narrow(0, 0, w.numel()).view(w.sizes());
  wf.copy_(w);
  return LinearF32(x.to(at::kFloat), wf);
}

at::Tensor LinearBf16KMajorWidened(const at::Tensor& x, const uint16_t* P, int64_t N, int64_t K) {
  // oneDNN: widened and packed in one reorder where its layout allows.
  if (F32GemmUsesDnnl() && K * N <= kMaxWidenBuffered) {  // the caller checked autograd
    if (at::Tensor y = LinearKMajorDnnl(x.to(at::kFloat), P, N, K, kKMajorGroup); y.defined()) return y;
  }
  const int64_t groups = KMajorGroups(N), ldw = groups * kKMajorGroup;
  at::Tensor wt;  // W^T [K, ldw]
  if (K * ldw <= kMaxWidenBuffered) {
    thread_local at::Tensor buffer;  // as LinearBf16Widened's: no page faults per GEMM
    if (!buffer.defined() || buffer.numel() < K * ldw) buffer = at::empty({K * ldw}, at::kFloat);
    wt = buffer.narrow(0, 0, K * ldw).view({K, ldw});
  } else {
    wt = at::empty({K, ldw}, at::kFloat);  // the head of all-logits prefill: not kept
  }
  float* wp = wt.data_ptr<float>();
  at::parallel_for(0, groups, /*grain_size=*/1, [&](int64_t g0, int64_t g1) { WidenKMajorT(P, K, g0, g1, wp, ldw); });
  return LinearF32(x.to(at::kFloat), wt.narrow(1, 0, N).t());
}

at::Tensor LinearBf16Amx(const at::Tensor& x, const at::Tensor& w) {
  // LibTorch 1.13 sends a bf16 x bf16 matmul to oneDNN (mkldnn_matmul),
  // which accumulates in fp32 and, on AMX CPUs, runs on the tiles.
  return at::linear(x.to(at::kBFloat16), w).to(at::kFloat);
}

at::Tensor LinearBf16Dot(const at::Tensor& x, const at::Tensor& w) {
  if (x.dim() != 2 || w.dim() != 2 || w.scalar_type() != at::kBFloat16 || x.size(1) != w.size(1)) {
    return LinearBf16Widened(x, w);
  }
  const at::Tensor xc = x.to(at::kFloat).contiguous(), wc = w.contiguous();
  const int64_t M = x.size(0), N = w.size(0), K = w.size(1), ldx = Bf16DotStride(K);
  // x rounded once (reused per calling thread), then tiles of weight rows
  // stay in L2 while every group of 4 rows passes over them (gemv_tiles.h).
  thread_local std::vector<uint16_t> xb;
  if (static_cast<int64_t>(xb.size()) < M * ldx) xb.resize(M * ldx);
  RoundRowsToBf16(xc.data_ptr<float>(), M, K, xb.data());
  at::Tensor y = at::empty({M, N}, at::kFloat);
  const uint16_t* xp = xb.data();
  const uint16_t* wp = static_cast<const uint16_t*>(wc.data_ptr());
  float* yp = y.data_ptr<float>();
  ForEachGemvTile(M, N, K * 2, [&](int64_t m, int64_t rows, int64_t t0, int64_t t1) {
    GemvBf16DotRounded(xp + m * ldx, rows, K, wp, t0, t1, yp + m * N, N);
  });
  return y;
}

at::Tensor LinearBf16Split(const at::Tensor& x, const at::Tensor& w) {
  if (x.dim() != 2 || w.dim() != 2 || !w.is_contiguous() || w.scalar_type() != at::kBFloat16 ||
      x.size(1) != w.size(1) || !AmxSplitSupported(x.size(0), w.size(0), w.size(1))) {
    return LinearBf16Widened(x, w);
  }
  const int64_t M = x.size(0), N = w.size(0), K = w.size(1);
  const at::Tensor xc = x.to(at::kFloat).contiguous();
  // Reused per calling thread: no page faults per GEMM.
  thread_local std::vector<uint32_t> packed;
  if (static_cast<int64_t>(packed.size()) < AmxSplitPackedWords(M, K)) packed.resize(AmxSplitPackedWords(M, K));
  const float* xp = xc.data_ptr<float>();
  uint32_t* pp = packed.data();
  at::parallel_for(0, AmxSplitRowBlocks(M), /*grain_size=*/1,
                   [&](int64_t b0, int64_t b1) { AmxSplitPackX(xp, M, K, b0, b1, pp); });
  at::Tensor y = at::empty({M, N}, at::kFloat);
  float* yp = y.data_ptr<float>();
  const uint16_t* wp = static_cast<const uint16_t*>(w.data_ptr());
  at::parallel_for(0, N / 16, /*grain_size=*/1,
                   [&](int64_t t0, int64_t t1) { AmxSplitGemm(pp, M, K, wp, t0 * 16, t1 * 16, yp, N); });
  return y;
}

}  // namespace pdserve
