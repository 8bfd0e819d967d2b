// The environment of the math libraries, set before they load, for the
// binaries that run the engine: OpenMP's wait policy (below) and OpenBLAS's
// kernels (blas_env.h). libgomp reads
// OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it loads (before main), and by
// default its idle threads spin for a while (300,000 iterations) before
// sleeping: two such processes on the same cores then burn each other's
// time (decode fell 10x next to another LibTorch process). So these
// binaries spin only briefly by default (GOMP_SPINCOUNT=kOmpSpinCount,
// some microseconds: long enough to catch the next parallel region of a
// decode step, which follows within microseconds, without a futex wake-up;
// short enough that a co-tenant keeps its share; docs/benchmarks.md
// §8):
//   DecideOmpWaitPolicy   the decision, from the environment (pure; tested)
//   ApplyLibraryEnv       first thing in main: sets GOMP_SPINCOUNT and
//                         OPENBLAS_CORETYPE where needed, and then
//                         re-executes the binary once
//   OmpWaitPolicySummary  the policy in effect and who chose it, for logs
//   DecideMallocTunables  glibc malloc on 2 MiB pages (pure; tested)
//   MallocSummary         whether it is, and who chose it, for logs
// The user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins; PDSERVE_OMP_YIELD=0
// keeps libgomp's default (spinning). The same re-execution sets
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc >= 2.35 reads it at start):
// malloc then asks for transparent huge pages on its large blocks, so a
// prefill's activations (fresh blocks of tens of MiB per layer) fault in 2
// MiB at a time instead of 4 KiB; a user's GLIBC_TUNABLES or
// PDSERVE_HUGE_PAGES=0 keeps glibc's default.
#pragma once

#include <functional>
#include <string>

namespace pdserve {

// Set on the re-executed process (and removed by it): the loop guard; what
// was set, comma-separated: "omp" (GOMP_SPINCOUNT), "blas"
// (OPENBLAS_CORETYPE), "malloc" (GLIBC_TUNABLES).
inline constexpr char kOmpReexecEnv[] = "PDSERVE_OMP_REEXEC";
// "0" opts out of the bounded-spin default.
inline constexpr char kOmpYieldEnv[] = "PDSERVE_OMP_YIELD";
// The default GOMP_SPINCOUNT: iterations an idle OpenMP thread spins before
// it sleeps.
inline constexpr char kOmpSpinCount[] = "1000";

enum class OmpWaitAction {
  kKeep,           // the environment already decides (or opted out): do nothing
  kSetBoundedSpin, // set GOMP_SPINCOUNT=kOmpSpinCount and re-execute
};

// kSetBoundedSpin when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set,
// PDSERVE_OMP_YIELD is not "0" and this is not already the re-executed
// process; kKeep otherwise. `getenv` returns nullptr for an unset variable.
OmpWaitAction DecideOmpWaitPolicy(const std::function<const char*(const char*)>& getenv);

// The GLIBC_TUNABLES value to set, or "" to keep: "glibc.malloc.hugetlb=1"
// unless GLIBC_TUNABLES is set at all, PDSERVE_HUGE_PAGES is "0" or this is
// the re-executed process.
std::string DecideMallocTunables(const std::function<const char*(const char*)>& getenv);

// Call first in main (before any thread starts; argv as main got it, with
// argv[argc] == nullptr). On kSetBoundedSpin sets GOMP_SPINCOUNT, and
// where DecideOpenBlasCore says so OPENBLAS_CORETYPE, and GLIBC_TUNABLES
// where DecideMallocTunables says so; then execs the binary
// (its /proc/self/exe target, so the process name stays) with the same argv
// and pid, once; does not return then. If exec fails it prints one line on
// stderr, restores the environment and returns.
void ApplyLibraryEnv(char** argv);

// E.g. "GOMP_SPINCOUNT=1000 (pdserve default)", "OMP_WAIT_POLICY=passive
// (environment)", "libgomp default (spin; PDSERVE_OMP_YIELD=0)".
std::string OmpWaitPolicySummary();

// "malloc on 2 MiB pages (pdserve default)", "GLIBC_TUNABLES=... (environment)"
// or "malloc on 4 KiB pages".
std::string MallocSummary();

}  // namespace pdserve
