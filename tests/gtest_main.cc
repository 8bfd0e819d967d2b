// main() of every gtest binary (tests/CMakeLists.txt links it in place of
// GTest::gtest_main): runs the tests as gtest's own main does, but
//   - exits 77 when they passed and at least one was skipped (GTEST_SKIP),
//     so that CTest (SKIP_RETURN_CODE 77) reports the test as skipped
//     instead of passed, and prints one line per skipped case,
//       PDSERVE_SKIPPED: Suite.Case
//     which scripts/test.sh and scripts/sanitize.sh check, case by case,
//     against their allow-lists;
//   - fails (exit 1) when a filter (--gtest_filter / GTEST_FILTER) is set
//     and matches no test: a CTest registered with a filter must not pass
//     with zero tests after a rename.
// A failure still exits 1, whether or not something was skipped.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  const std::string filter = GTEST_FLAG_GET(filter);
  if (!GTEST_FLAG_GET(list_tests) && filter != "*" && unit.test_to_run_count() == 0) {
    std::fprintf(stderr, "FAIL: the filter '%s' matches no test of %s (renamed tests?)\n", filter.c_str(), argv[0]);
    return 1;
  }
  const int skipped = unit.skipped_test_count();
  if (skipped > 0) {
    for (int i = 0; i < unit.total_test_suite_count(); ++i) {
      const testing::TestSuite& suite = *unit.GetTestSuite(i);
      for (int j = 0; j < suite.total_test_count(); ++j) {
        const testing::TestInfo& info = *suite.GetTestInfo(j);
        if (info.should_run() && info.result()->Skipped()) {
          std::printf("PDSERVE_SKIPPED: %s.%s\n", info.test_suite_name(), info.name());
        }
      }
    }
    std::fflush(stdout);
  }
  if (rc == 0 && skipped > 0) {
    std::fprintf(stderr, "%d test(s) skipped (listed above): exit code 77, reported as skipped by CTest\n", skipped);
    return 77;
  }
  return rc;
}
