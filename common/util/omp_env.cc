#include "common/util/omp_env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace pdserve {
namespace {

// Whether this process was re-executed by ApplyOmpWaitPolicy (the marker is
// removed then, so that children start from the user's environment).
bool g_set_by_pdserve = false;

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
  return OmpWaitAction::kSetPassive;
}

void ApplyOmpWaitPolicy(char** argv) {
  if (IsSet(std::getenv(kOmpReexecEnv))) {
    g_set_by_pdserve = true;
    unsetenv(kOmpReexecEnv);
    return;
  }
  if (DecideOmpWaitPolicy([](const char* name) { return std::getenv(name); }) != OmpWaitAction::kSetPassive) return;
  const std::string exe = SelfExe();
  if (exe.empty() || argv == nullptr || argv[0] == nullptr) {
    std::fprintf(stderr, "pdserve: cannot re-execute to set OMP_WAIT_POLICY=passive (binary path unknown); "
                         "OpenMP threads spin\n");
    return;
  }
  setenv("OMP_WAIT_POLICY", "passive", 1);
  setenv(kOmpReexecEnv, "1", 1);
  execv(exe.c_str(), argv);
  const int err = errno;
  unsetenv("OMP_WAIT_POLICY");
  unsetenv(kOmpReexecEnv);
  std::fprintf(stderr, "pdserve: re-executing %s to set OMP_WAIT_POLICY=passive failed (%s); OpenMP threads spin\n",
               exe.c_str(), std::strerror(err));
}

std::string OmpWaitPolicySummary() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (IsSet(policy)) {
    return std::string("OMP_WAIT_POLICY=") + policy + (g_set_by_pdserve ? " (pdserve default)" : " (environment)");
  }
  if (IsSet(spin)) return std::string("GOMP_SPINCOUNT=") + spin + " (environment)";
  const char* yield = std::getenv(kOmpYieldEnv);
  if (yield != nullptr && std::strcmp(yield, "0") == 0) return "libgomp default (spin; PDSERVE_OMP_YIELD=0)";
  return "libgomp default (spin)";
}

}  // namespace pdserve
