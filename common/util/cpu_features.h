// What this CPU (and the OS) lets pdserve run, and which kernel path to use.
// AVX2+FMA is the baseline; AVX-512 and AMX-BF16 paths are chosen at run time.
//   CpuFeatures / HostCpuFeatures  the flags, detected once (CPUID, XGETBV,
//                                  and on Linux the AMX tile-data permission)
//   Isa, IsaName, ParseIsa         the kernel paths: avx2 < avx512 < amx
//   IsaSupported, BestIsa          what a CPU can run
//   SelectIsa                      the path to use: the best, or a forced one
//                                  (PDSERVE_ISA) with a clear error if the CPU
//                                  lacks it
//   HostIsa                        SelectIsa(host, PDSERVE_ISA), once
// No LibTorch; cheap to include from any kernel.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

struct CpuFeatures {
  bool sse42 = false;        // crc32 (the hand-off's checksum, crc32c.h)
  bool avx2 = false;         // and the OS saves YMM state
  bool fma = false;
  bool avx512f = false;      // and the OS saves ZMM/opmask state
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;  // vpdpbusd (the int8-dot kernel, gemv_q8.h)
  // AVX-512 on 256-bit halves (AMD Zen 4: family 0x19). Not a feature:
  // a kernel schedule follows it (gemv_avx512.cc, fp32 at batch 1).
  bool avx512_half_width = false;
  bool amx_tile = false;     // CPU has it, the OS saves tile state and (Linux)
  bool amx_bf16 = false;     // granted this process XTILEDATA permission
};

// The host's features, detected on first call (thread-safe). On Linux the
// first call also asks the kernel for AMX tile-data permission
// (arch_prctl ARCH_REQ_XCOMP_PERM), which every AMX kernel needs.
const CpuFeatures& HostCpuFeatures();

// "avx2 fma avx512f ... amx_bf16": the features present, for logs.
std::string CpuFeaturesString(const CpuFeatures& f);

enum class Isa { kAvx2 = 0, kAvx512 = 1, kAmx = 2 };

// The environment variable that forces a path.
inline constexpr char kIsaEnv[] = "PDSERVE_ISA";

const char* IsaName(Isa isa);  // "avx2", "avx512", "amx"
// InvalidArgument naming the value unless it is avx2, avx512 or amx.
absl::StatusOr<Isa> ParseIsa(const std::string& name);

// avx2: AVX2+FMA; avx512: that + AVX-512 F/BW/VL; amx: that + AVX512_BF16,
// AMX-TILE and AMX-BF16 (usable).
bool IsaSupported(const CpuFeatures& f, Isa isa);
// The widest supported path; kAvx2 even when the CPU lacks AVX2 (callers
// then check IsaSupported(f, kAvx2) and take their portable fallback).
Isa BestIsa(const CpuFeatures& f);

// `forced` null or empty: BestIsa(f). Otherwise the named path, or
// InvalidArgument for a bad name, and FailedPrecondition naming the missing
// features when this CPU cannot run it (instead of SIGILL later).
absl::StatusOr<Isa> SelectIsa(const CpuFeatures& f, const char* forced);

// SelectIsa(HostCpuFeatures(), getenv(PDSERVE_ISA)), computed once. The
// engine checks it at load, so a binary with a bad PDSERVE_ISA fails at
// start.
absl::StatusOr<Isa> HostIsa();

}  // namespace pdserve
