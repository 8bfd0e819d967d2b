#include "common/util/omp_env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/util/blas_env.h"
#include "common/util/cpu_features.h"
#include "common/util/huge_pages_env.h"

namespace pdserve {
namespace {

// Whether GOMP_SPINCOUNT was set by ApplyLibraryEnv's re-execution (the
// markers are removed then, so that children start from the user's
// environment).
bool g_set_by_pdserve = false;
bool g_malloc_by_pdserve = false;  // GLIBC_TUNABLES likewise

constexpr char kMallocHugeTlb[] = "glibc.malloc.hugetlb=1";

bool IsSet(const char* v) { return v != nullptr && v[0] != '\0'; }

// The binary's own path (not "/proc/self/exe": exec'ing that would rename
// the process "exe"); empty when unknown or deleted.
std::string SelfExe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  constexpr char kDeleted[] = " (deleted)";
  if (path.size() > sizeof(kDeleted) - 1 && path.compare(path.size() - (sizeof(kDeleted) - 1), std::string::npos,
                                                         kDeleted) == 0) {
    return "";
  }
  return path;
}

}  // namespace

OmpWaitAction DecideOmpWaitPolicy(const std::function<const char*(const char*)>& getenv) {
  if (IsSet(getenv(kOmpReexecEnv))) return OmpWaitAction::kKeep;  // already re-executed once
  if (IsSet(getenv("OMP_WAIT_POLICY")) || IsSet(getenv("GOMP_SPINCOUNT"))) return OmpWaitAction::kKeep;
  const char* yield = getenv(kOmpYieldEnv);
  if (yield != nullptr && std::strcmp(yield, "0") == 0) return OmpWaitAction::kKeep;
  return OmpWaitAction::kSetBoundedSpin;
}

std::string DecideMallocTunables(const std::function<const char*(const char*)>& getenv) {
  if (IsSet(getenv(kOmpReexecEnv)) || getenv("GLIBC_TUNABLES") != nullptr) return "";
  return HugePagesOn(getenv(kHugePagesEnv)) ? kMallocHugeTlb : "";
}

void ApplyLibraryEnv(char** argv) {
  const char* marker = std::getenv(kOmpReexecEnv);
  if (IsSet(marker)) {  // the re-executed process: note what was set, clear the markers
    g_set_by_pdserve = std::strstr(marker, "omp") != nullptr;
    g_malloc_by_pdserve = std::strstr(marker, "malloc") != nullptr;
    const char* picked = std::getenv(kOpenBlasPickedEnv);
    if (IsSet(picked)) NoteOpenBlasOverride(picked);
    unsetenv(kOmpReexecEnv);
    unsetenv(kOpenBlasPickedEnv);
    return;
  }
  const auto env = [](const char* name) { return std::getenv(name); };
  const bool omp = DecideOmpWaitPolicy(env) == OmpWaitAction::kSetBoundedSpin;
  const std::string picked = OpenBlasCoreName();
  const std::string blas = DecideOpenBlasCore(picked, HostCpuFeatures(), env);
  const std::string tunables = DecideMallocTunables(env);
  if (!omp && blas.empty() && tunables.empty()) return;
  std::string what, marker_value;
  const auto add = [&](const std::string& setting, const char* marker_part) {
    what += (what.empty() ? "" : " and ") + setting;
    marker_value += (marker_value.empty() ? "" : ",") + std::string(marker_part);
  };
  if (omp) add(std::string("GOMP_SPINCOUNT=") + kOmpSpinCount, "omp");
  if (!blas.empty()) add("OPENBLAS_CORETYPE=" + blas, "blas");
  if (!tunables.empty()) add("GLIBC_TUNABLES=" + tunables, "malloc");
  const std::string exe = SelfExe();
  if (exe.empty() || argv == nullptr || argv[0] == nullptr) {
    std::fprintf(stderr, "pdserve: cannot re-execute to set %s (binary path unknown); running without\n",
                 what.c_str());
    return;
  }
  if (omp) setenv("GOMP_SPINCOUNT", kOmpSpinCount, 1);
  if (!blas.empty()) {
    setenv("OPENBLAS_CORETYPE", blas.c_str(), 1);
    setenv(kOpenBlasPickedEnv, picked.c_str(), 1);
  }
  if (!tunables.empty()) setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
  setenv(kOmpReexecEnv, marker_value.c_str(), 1);
  execv(exe.c_str(), argv);
  const int err = errno;
  if (omp) unsetenv("GOMP_SPINCOUNT");
  if (!blas.empty()) unsetenv("OPENBLAS_CORETYPE");
  if (!tunables.empty()) unsetenv("GLIBC_TUNABLES");
  unsetenv(kOpenBlasPickedEnv);
  unsetenv(kOmpReexecEnv);
  std::fprintf(stderr, "pdserve: re-executing %s to set %s failed (%s); running without\n", exe.c_str(), what.c_str(),
               std::strerror(err));
}

std::string OmpWaitPolicySummary() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (IsSet(policy)) {
    return std::string("OMP_WAIT_POLICY=") + policy + " (environment)";
  }
  if (IsSet(spin)) return std::string("GOMP_SPINCOUNT=") + spin + (g_set_by_pdserve ? " (pdserve default)" : " (environment)");
  const char* yield = std::getenv(kOmpYieldEnv);
  if (yield != nullptr && std::strcmp(yield, "0") == 0) return "libgomp default (spin; PDSERVE_OMP_YIELD=0)";
  return "libgomp default (spin)";
}

std::string MallocSummary() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr) return "malloc on 4 KiB pages";
  if (g_malloc_by_pdserve && std::strcmp(tunables, kMallocHugeTlb) == 0) return "malloc on 2 MiB pages (pdserve default)";
  return std::string("GLIBC_TUNABLES=") + tunables + " (environment)";
}

}  // namespace pdserve
