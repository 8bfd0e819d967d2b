// Shared fixtures for the unit tests: small configs built in code.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "common/model/config.h"

namespace pdserve::testing {

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
