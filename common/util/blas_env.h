// OpenBLAS's kernel choice, checked before the engine runs. OpenBLAS picks
// its kernels by CPU model when it loads; 0.3.21 (Debian 12) does not know
// some newer models (this repo's Sapphire Rapids VM among them) and then
// falls back to its SSE3 "Prescott" kernels: sgemm at 45 instead of ~190
// GFLOP/s on 2 cores, and every fp32 prefill GEMM with it. OpenBLAS reads
// OPENBLAS_CORETYPE only when it loads, so the binaries set it and
// re-execute themselves (ApplyLibraryEnv, omp_env.h).
//   OpenBlasCoreName    the core the loaded OpenBLAS runs; "" without OpenBLAS
//   DecideOpenBlasCore  the OPENBLAS_CORETYPE to set, or "" to keep (pure)
//   DescribeOpenBlas    the core in effect and who chose it (pure)
//   OpenBlasSummary     DescribeOpenBlas for this process, for logs
#pragma once

#include <functional>
#include <string>

#include "common/util/cpu_features.h"

namespace pdserve {

// Carries OpenBLAS's own pick across the re-execution (for the log).
inline constexpr char kOpenBlasPickedEnv[] = "PDSERVE_OPENBLAS_PICKED";

// openblas_get_corename() of the OpenBLAS in this process (looked up with
// dlsym), e.g. "Prescott", "Haswell", "SkylakeX"; "" when there is none.
std::string OpenBlasCoreName();

// The core type to force when OpenBLAS's pick (`current`) uses narrower
// vectors than the CPU has: "SkylakeX" on AVX-512F/BW/VL, "Haswell" on
// AVX2+FMA. "" (keep) when OPENBLAS_CORETYPE is set at all (the user's
// choice wins), when there is no OpenBLAS, or when the pick is as wide.
std::string DecideOpenBlasCore(const std::string& current, const CpuFeatures& f,
                               const std::function<const char*(const char*)>& getenv);

// Called once by ApplyLibraryEnv in the re-executed process: OpenBLAS's own
// pick, before pdserve overrode it.
void NoteOpenBlasOverride(const std::string& picked);

// E.g. "OpenBLAS SkylakeX (pdserve set OPENBLAS_CORETYPE; OpenBLAS picked
// Prescott)" (`picked` non-empty), "OpenBLAS Cooperlake", "OpenBLAS Haswell
// (OPENBLAS_CORETYPE from the environment)" (`env_set`), "no OpenBLAS"
// (`core` empty). A core from the environment narrower than the CPU's
// vectors (DecideOpenBlasCore would widen it) says so: an AVX-512 machine
// with OPENBLAS_CORETYPE=Haswell runs sgemm at ~0.55x its peak.
std::string DescribeOpenBlas(const std::string& core, const std::string& picked, bool env_set,
                             const CpuFeatures& features);

// DescribeOpenBlas of this process's OpenBLAS, override and environment.
std::string OpenBlasSummary();

}  // namespace pdserve
