// Bit-equality checks shared by the MXFP4 kernel tests (mxfp4_test,
// mxfp4_gemm_test).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace pdserve::testing {

// The same bits, or NaN in both (which NaN is not specified).
inline bool SameResult(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

// Every element of `got` is `want`'s (sentinels outside the computed range included).
inline void ExpectSame(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(SameResult(got[i], want[i])) << what << " at " << i << ": " << got[i] << " vs " << want[i];
  }
}

}  // namespace pdserve::testing
