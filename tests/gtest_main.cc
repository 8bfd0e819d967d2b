// main() of every gtest binary (tests/CMakeLists.txt links it in place of
// GTest::gtest_main): runs the tests as gtest's own main does, but exits
// 77 when they passed and at least one was skipped (GTEST_SKIP), so that
// CTest (SKIP_RETURN_CODE 77) reports the test as skipped instead of
// passed. A failure still exits 1, whether or not something was skipped.
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const int skipped = testing::UnitTest::GetInstance()->skipped_test_count();
  if (rc == 0 && skipped > 0) {
    std::fprintf(stderr, "%d test(s) skipped (listed above): exit code 77, reported as skipped by CTest\n", skipped);
    return 77;
  }
  return rc;
}
