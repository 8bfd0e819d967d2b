// A test's guard for the process-wide --bf16-matmul path
// (common/kernels/bf16_matmul.h): a test sets the path it needs with
// SetBf16Matmul and this puts the default back when the test ends, so the
// next test in the binary starts from it.
#pragma once

#include "common/kernels/bf16_matmul.h"

namespace pdserve::testing {

struct RestoreBf16Matmul {
  ~RestoreBf16Matmul() { (void)SetBf16Matmul(DefaultBf16Matmul()); }
};

}  // namespace pdserve::testing
