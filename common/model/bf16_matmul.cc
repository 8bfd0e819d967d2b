#include "common/model/bf16_matmul.h"

#include <ATen/ATen.h>

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/util/cpu_features.h"

namespace pdserve {

namespace {

// AMX-BF16 with the OS's tile state and Linux's permission (cpu_features).
bool CpuHasAmxBf16() { return HostCpuFeatures().amx_bf16; }

std::atomic<Bf16Matmul> g_mode{Bf16Matmul::kWiden};
}  // namespace

absl::StatusOr<Bf16Matmul> ParseBf16Matmul(std::string_view name) {
  if (name == "widen") return Bf16Matmul::kWiden;
  if (name == "auto") return CpuHasAmxBf16() ? Bf16Matmul::kAmx : Bf16Matmul::kWiden;
  if (name == "amx") {
    if (!CpuHasAmxBf16()) return absl::FailedPreconditionError("this CPU (or kernel) has no AMX-BF16");
    return Bf16Matmul::kAmx;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown bf16 matmul \"", std::string(name), "\" (widen, amx or auto)"));
}

absl::Status SetBf16Matmul(Bf16Matmul mode) {
  if (mode == Bf16Matmul::kAmx && !CpuHasAmxBf16()) {
    return absl::FailedPreconditionError("bf16 matmul amx: this CPU (or kernel) has no AMX-BF16");
  }
  g_mode.store(mode);
  return absl::OkStatus();
}

Bf16Matmul GetBf16Matmul() { return g_mode.load(); }

at::Tensor LinearBf16(const at::Tensor& x, const at::Tensor& w) {
  return GetBf16Matmul() == Bf16Matmul::kAmx ? LinearBf16Amx(x, w) : LinearBf16Widened(x, w);
}

at::Tensor LinearBf16Widened(const at::Tensor& x, const at::Tensor& w) {
  // A per-thread buffer: a fresh 10 MB tensor per call costs page faults
  // and zeroing on every prefill matmul (~9% of a bf16 prefill).
  constexpr int64_t kMaxBuffered = int64_t{16} << 20;  // elements (64 MB); the head is not buffered
  if (w.numel() > kMaxBuffered) return at::linear(x.to(at::kFloat), w.to(at::kFloat));
  thread_local at::Tensor buffer;
  if (!buffer.defined() || buffer.numel() < w.numel()) buffer = at::empty({w.numel()}, at::kFloat);
  at::Tensor wf = buffer.narrow(0, 0, w.numel()).view(w.sizes());
  wf.copy_(w);
  return at::linear(x.to(at::kFloat), wf);
}

at::Tensor LinearBf16Amx(const at::Tensor& x, const at::Tensor& w) {
  // LibTorch 1.13 sends a bf16 x bf16 matmul to oneDNN (mkldnn_matmul),
  // which accumulates in fp32 and, on AMX CPUs, runs on the tiles.
  return at::linear(x.to(at::kBFloat16), w).to(at::kFloat);
}

}  // namespace pdserve
