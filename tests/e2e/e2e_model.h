// What the C++ e2e tests of the serving stack share: where the binaries
// are, the model they serve (the tiny config with a long context and an
// EOS), and deterministic prompts.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/config.h"
#include "tests/test_util.h"

namespace pdserve::testing {

// A binary of this build tree, e.g. Bin("router/pdserve-router"), or of
// the tree PDSERVE_E2E_BINARY_DIR names (to run a test against an older
// build, e.g. to see a regression test fail before its fix).
inline std::string Bin(const std::string& rel) {
  const char* other = std::getenv("PDSERVE_E2E_BINARY_DIR");
  return absl::StrCat(other != nullptr && *other != 0 ? other : PDSERVE_BINARY_DIR, "/", rel);
}

// n ids below the tiny vocabulary, different for each salt.
inline std::vector<int64_t> Prompt(int64_t n, int64_t salt) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 37 + salt * 11 + 5) % 300);
  return p;
}

inline ModelConfig E2eConfig() {
  ModelConfig c = TinyConfig();
  c.max_context = 32768;
  c.eos_token_id = 299;
  return c;
}

}  // namespace pdserve::testing
