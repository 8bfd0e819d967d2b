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

std::string OpenBlasSummary() {
  const std::string core = OpenBlasCoreName();
  if (core.empty()) return "no OpenBLAS";
  if (!g_picked.empty()) return "OpenBLAS " + core + " (pdserve set OPENBLAS_CORETYPE; OpenBLAS picked " + g_picked + ")";
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    return "OpenBLAS " + core + " (OPENBLAS_CORETYPE from the environment)";
  }
  return "OpenBLAS " + core;
}

}  // namespace pdserve
