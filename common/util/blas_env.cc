#include "common/util/blas_env.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace pdserve {
namespace {

std::string g_picked;  // OpenBLAS's pick when pdserve overrode it

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// 2: AVX-512 kernels, 1: AVX2 kernels, 0: narrower (or unknown).
int VectorLevel(const std::string& core) {
  const std::string c = Lower(core);
  if (c == "skylakex" || c == "cooperlake" || c == "sapphirerapids") return 2;
  if (c == "haswell" || c == "zen") return 1;
  return 0;
}

}  // namespace

std::string OpenBlasCoreName() {
  using CoreNameFn = char* (*)();
  auto fn = reinterpret_cast<CoreNameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = fn != nullptr ? fn() : nullptr;
  return name != nullptr ? name : "";
}

std::string DecideOpenBlasCore(const std::string& current, const CpuFeatures& f,
                               const std::function<const char*(const char*)>& getenv) {
  if (getenv("OPENBLAS_CORETYPE") != nullptr || current.empty()) return "";
  const int want = f.avx512f && f.avx512bw && f.avx512vl ? 2 : (f.avx2 && f.fma ? 1 : 0);
  if (VectorLevel(current) >= want) return "";
  return want == 2 ? "SkylakeX" : "Haswell";
}

void NoteOpenBlasOverride(const std::string& picked) { g_picked = picked; }

std::string DescribeOpenBlas(const std::string& core, const std::string& picked, bool env_set, const CpuFeatures& f) {
  if (core.empty()) return "no OpenBLAS";
  if (!picked.empty()) return "OpenBLAS " + core + " (pdserve set OPENBLAS_CORETYPE; OpenBLAS picked " + picked + ")";
  if (!env_set) return "OpenBLAS " + core;
  const bool narrower = !DecideOpenBlasCore(core, f, [](const char*) -> const char* { return nullptr; }).empty();
  return "OpenBLAS " + core + " (OPENBLAS_CORETYPE from the environment" +
         (narrower ? "; narrower than this CPU's vectors: fp32 GEMMs, prefill among them, run below the CPU's "
                     "peak; unset it to let OpenBLAS pick)"
                   : ")");
}

std::string OpenBlasSummary() {
  return DescribeOpenBlas(OpenBlasCoreName(), g_picked, std::getenv("OPENBLAS_CORETYPE") != nullptr,
                          HostCpuFeatures());
}

}  // namespace pdserve
