// ModelConfig: the GPT-OSS-Lite hyper-parameters (MODEL_SPEC.md, "Default
// configuration"), parsed from JSON and validated. No LibTorch here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

// How text maps to ids. Chosen by the model config.
enum class TokenizerType { kByte, kChar, kBpe };

struct YarnConfig {
  double factor = 32.0;
  int64_t original_max_position = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

struct ModelConfig {
  std::string name = "gpt-oss-lite-502m";
  int64_t vocab_size = 128000;
  int64_t d_model = 768;
  int64_t n_layers = 12;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 4;
  int64_t head_dim = 96;
  int64_t window = 128;
  int64_t n_experts = 8;
  int64_t top_k = 2;
  int64_t n_shared_experts = 1;
  int64_t expert_hidden = 1536;
  double rope_theta = 100000.0;
  YarnConfig yarn;
  int64_t rope_identity_pairs_global = 12;
  double sink_clamp_lo = -10.0;
  double sink_clamp_hi = 15.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  int64_t max_context = 131072;
  TokenizerType tokenizer = TokenizerType::kByte;
  std::string tokenizer_file;  // for kBpe, relative to the model directory
  std::optional<int64_t> eos_token_id;

  // Layer l is windowed iff l % 2 == 0 (MODEL_SPEC.md).
  static bool IsWindowed(int64_t layer) { return layer % 2 == 0; }
  int64_t n_rep() const { return n_heads / n_kv_heads; }
  int64_t NumWindowedLayers() const { return (n_layers + 1) / 2; }
  int64_t NumGlobalLayers() const { return n_layers / 2; }

  // Exact parameter counts (embedding counted once when tied).
  int64_t TotalParams() const;
  // Parameters touched per token: top_k of n_experts routed experts.
  int64_t ActiveParams() const;
  // K+V bytes one token adds to one layer at `bytes_per_element`.
  int64_t KvBytesPerTokenPerLayer(int64_t bytes_per_element) const {
    return 2 * n_kv_heads * head_dim * bytes_per_element;
  }

  // Serialises back to the canonical JSON (nested "yarn").
  std::string ToJson() const;
};

// Parses and validates. Errors are InvalidArgument naming the bad field and
// the value found, e.g. "config field 'n_heads' (6) must be a multiple of
// 'n_kv_heads' (4)".
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);

// Reads a file and parses it; NotFound when the file cannot be read.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Checks the invariants the math needs. Returns InvalidArgument naming the
// field on failure.
absl::Status ValidateModelConfig(const ModelConfig& config);

}  // namespace pdserve
