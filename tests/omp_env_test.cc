// The OpenMP wait-policy and OpenBLAS core decisions of the engine binaries
// (common/util/omp_env.h, common/util/blas_env.h).
#include "common/util/omp_env.h"

#include "common/util/blas_env.h"
#include "common/util/huge_pages_env.h"

#include <cstdlib>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace pdserve {
namespace {

OmpWaitAction Decide(const std::map<std::string, std::string>& env) {
  return DecideOmpWaitPolicy([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(OmpEnvTest, UnsetEnvironmentGetsBoundedSpin) {
  EXPECT_EQ(Decide({}), OmpWaitAction::kSetBoundedSpin);
  EXPECT_EQ(Decide({{"OMP_NUM_THREADS", "2"}}), OmpWaitAction::kSetBoundedSpin);
  EXPECT_EQ(Decide({{"OMP_WAIT_POLICY", ""}}), OmpWaitAction::kSetBoundedSpin);  // empty = unset
  EXPECT_EQ(Decide({{kOmpYieldEnv, "1"}}), OmpWaitAction::kSetBoundedSpin);
}

TEST(OmpEnvTest, UserSettingWins) {
  EXPECT_EQ(Decide({{"OMP_WAIT_POLICY", "active"}}), OmpWaitAction::kKeep);
  EXPECT_EQ(Decide({{"OMP_WAIT_POLICY", "PASSIVE"}}), OmpWaitAction::kKeep);
  EXPECT_EQ(Decide({{"GOMP_SPINCOUNT", "10000"}}), OmpWaitAction::kKeep);
}

TEST(OmpEnvTest, OptOut) { EXPECT_EQ(Decide({{kOmpYieldEnv, "0"}}), OmpWaitAction::kKeep); }

TEST(OmpEnvTest, ReexecutedProcessNeverLoops) {
  EXPECT_EQ(Decide({{kOmpReexecEnv, "1"}}), OmpWaitAction::kKeep);
}

TEST(OmpEnvTest, SummaryNamesTheSource) {
  // This test binary never calls ApplyLibraryEnv: a set policy is the
  // environment's.
  setenv("OMP_WAIT_POLICY", "active", 1);
  EXPECT_EQ(OmpWaitPolicySummary(), "OMP_WAIT_POLICY=active (environment)");
  unsetenv("OMP_WAIT_POLICY");
  setenv("GOMP_SPINCOUNT", "1000", 1);
  EXPECT_EQ(OmpWaitPolicySummary(), "GOMP_SPINCOUNT=1000 (environment)");
  unsetenv("GOMP_SPINCOUNT");
  setenv(kOmpYieldEnv, "0", 1);
  EXPECT_EQ(OmpWaitPolicySummary(), "libgomp default (spin; PDSERVE_OMP_YIELD=0)");
  unsetenv(kOmpYieldEnv);
}

std::string DecideMalloc(const std::map<std::string, std::string>& env) {
  return DecideMallocTunables([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(MallocEnvTest, HugePagesUnlessTheUserDecides) {
  EXPECT_EQ(DecideMalloc({}), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(DecideMalloc({{"PDSERVE_HUGE_PAGES", "1"}}), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(DecideMalloc({{"PDSERVE_HUGE_PAGES", "0"}}), "");
  EXPECT_EQ(DecideMalloc({{"GLIBC_TUNABLES", "glibc.malloc.arena_max=2"}}), "");
  EXPECT_EQ(DecideMalloc({{"GLIBC_TUNABLES", ""}}), "");  // set, even empty: the user's
  EXPECT_EQ(DecideMalloc({{kOmpReexecEnv, "omp"}}), "");
}

// The one rule both the weights' arena and malloc read PDSERVE_HUGE_PAGES by.
TEST(MallocEnvTest, HugePagesRuleIsOnUnlessZero) {
  EXPECT_TRUE(HugePagesOn(nullptr));
  EXPECT_TRUE(HugePagesOn("1"));
  EXPECT_TRUE(HugePagesOn(""));
  EXPECT_TRUE(HugePagesOn("00"));
  EXPECT_FALSE(HugePagesOn("0"));
  EXPECT_EQ(DecideMalloc({{kHugePagesEnv, ""}}), "glibc.malloc.hugetlb=1");
}

TEST(MallocEnvTest, SummaryNamesTheSource) {
  // Never re-executed here: a set GLIBC_TUNABLES is the environment's.
  const char* before = std::getenv("GLIBC_TUNABLES");
  const std::string saved = before != nullptr ? before : "";
  unsetenv("GLIBC_TUNABLES");
  EXPECT_EQ(MallocSummary(), "malloc on 4 KiB pages");
  setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1);
  EXPECT_EQ(MallocSummary(), "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (environment)");
  if (before != nullptr) setenv("GLIBC_TUNABLES", saved.c_str(), 1);
  else unsetenv("GLIBC_TUNABLES");
}

CpuFeatures Avx2Cpu() {
  CpuFeatures f;
  f.avx2 = f.fma = true;
  return f;
}

CpuFeatures Avx512Cpu() {
  CpuFeatures f = Avx2Cpu();
  f.avx512f = f.avx512bw = f.avx512vl = true;
  return f;
}

std::string DecideBlas(const std::string& current, const CpuFeatures& f,
                       const std::map<std::string, std::string>& env = {}) {
  return DecideOpenBlasCore(current, f, [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(OpenBlasCoreTest, NarrowFallbackIsRaisedToTheCpusVectors) {
  // OpenBLAS 0.3.21 on a CPU model it does not know: SSE3 kernels.
  EXPECT_EQ(DecideBlas("Prescott", Avx512Cpu()), "SkylakeX");
  EXPECT_EQ(DecideBlas("Prescott", Avx2Cpu()), "Haswell");
  EXPECT_EQ(DecideBlas("Sandybridge", Avx2Cpu()), "Haswell");  // AVX1 only
  EXPECT_EQ(DecideBlas("Haswell", Avx512Cpu()), "SkylakeX");
  EXPECT_EQ(DecideBlas("Zen", Avx512Cpu()), "SkylakeX");  // an AVX-512 Zen OpenBLAS calls Zen
}

TEST(OpenBlasCoreTest, AsWideAPickIsKept) {
  EXPECT_EQ(DecideBlas("Cooperlake", Avx512Cpu()), "");
  EXPECT_EQ(DecideBlas("SkylakeX", Avx512Cpu()), "");
  EXPECT_EQ(DecideBlas("SAPPHIRERAPIDS", Avx512Cpu()), "");  // names compare without case
  EXPECT_EQ(DecideBlas("Haswell", Avx2Cpu()), "");
  EXPECT_EQ(DecideBlas("Zen", Avx2Cpu()), "");
  EXPECT_EQ(DecideBlas("Prescott", CpuFeatures{}), "");  // nothing wider to give
}

TEST(OpenBlasCoreTest, SummarySaysWhoChoseAndWhenTheEnvironmentNarrows) {
  EXPECT_EQ(DescribeOpenBlas("", "", false, Avx512Cpu()), "no OpenBLAS");
  EXPECT_EQ(DescribeOpenBlas("Cooperlake", "", false, Avx512Cpu()), "OpenBLAS Cooperlake");
  EXPECT_EQ(DescribeOpenBlas("SkylakeX", "Prescott", false, Avx512Cpu()),
            "OpenBLAS SkylakeX (pdserve set OPENBLAS_CORETYPE; OpenBLAS picked Prescott)");
  EXPECT_EQ(DescribeOpenBlas("Haswell", "", true, Avx2Cpu()),
            "OpenBLAS Haswell (OPENBLAS_CORETYPE from the environment)");
  const std::string narrowed = DescribeOpenBlas("Haswell", "", true, Avx512Cpu());
  EXPECT_EQ(narrowed.rfind("OpenBLAS Haswell (OPENBLAS_CORETYPE from the environment; narrower than this CPU", 0), 0u)
      << narrowed;
  EXPECT_NE(narrowed.find("unset it"), std::string::npos) << narrowed;
}

TEST(OpenBlasCoreTest, UserSettingAndMissingOpenBlasKeep) {
  EXPECT_EQ(DecideBlas("Prescott", Avx512Cpu(), {{"OPENBLAS_CORETYPE", "Prescott"}}), "");
  EXPECT_EQ(DecideBlas("Prescott", Avx512Cpu(), {{"OPENBLAS_CORETYPE", ""}}), "");  // set, even empty
  EXPECT_EQ(DecideBlas("", Avx512Cpu()), "");  // no OpenBLAS in the process
}

TEST(OpenBlasCoreTest, SummaryWithoutOpenBlas) {
  // This test binary does not link OpenBLAS.
  if (!OpenBlasCoreName().empty()) GTEST_SKIP() << "OpenBLAS is loaded here: " << OpenBlasCoreName();
  EXPECT_EQ(OpenBlasSummary(), "no OpenBLAS");
}

}  // namespace
}  // namespace pdserve
