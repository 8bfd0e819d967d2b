// Shared fixtures for the unit tests: small configs built in code.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "common/model/config.h"

namespace pdserve::testing {

// A float's bits and back (bit-exact comparisons, hand-made values).
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// fp32 -> bf16 bits, to nearest even (finite values), and back.
inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float Bf16ToFloat(uint16_t b) { return FloatFromBits(static_cast<uint32_t>(b) << 16); }

// 4 layers (2 windowed, 2 global), window 8: prompts of 20+ tokens wrap the
// ring during prefill and decode.
inline ModelConfig TinyConfig() {
  ModelConfig c;
  c.name = "tiny";
  c.vocab_size = 300;
  c.d_model = 64;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.window = 8;
  c.n_experts = 8;
  c.top_k = 2;
  c.n_shared_experts = 1;
  c.expert_hidden = 96;
  c.rope_identity_pairs_global = 2;
  c.max_context = 4096;
  return c;
}

// A fresh directory under TMPDIR, removed by the destructor unless
// PDSERVE_KEEP_TEST_DIRS is set (to look at models and server logs).
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pdserve_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    if (std::getenv("PDSERVE_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

}  // namespace pdserve::testing
