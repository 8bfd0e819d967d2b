// The OpenMP wait-policy decision of the engine binaries (common/util/omp_env.h).
#include "common/util/omp_env.h"

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

TEST(OmpEnvTest, UnsetEnvironmentGetsPassive) {
  EXPECT_EQ(Decide({}), OmpWaitAction::kSetPassive);
  EXPECT_EQ(Decide({{"OMP_NUM_THREADS", "2"}}), OmpWaitAction::kSetPassive);
  EXPECT_EQ(Decide({{"OMP_WAIT_POLICY", ""}}), OmpWaitAction::kSetPassive);  // empty = unset
  EXPECT_EQ(Decide({{kOmpYieldEnv, "1"}}), OmpWaitAction::kSetPassive);
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
  // This test binary never calls ApplyOmpWaitPolicy: a set policy is the
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

}  // namespace
}  // namespace pdserve
