// ModelConfig: the GPT-OSS-Lite hyper-parameters (docs/model.md,
// "Configuration"), parsed from JSON and validated. No LibTorch here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"

namespace pdserve {

// How text maps to ids. Chosen by the model config.
enum class TokenizerType { kByte, kChar, kBpe };

struct YarnConfig {
  double factor = 32.0;
  int64_t original_max_position = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // The correction range's ends rounded to integers (floor/ceil), as
  // GPT-OSS-Lite does; gpt-oss says `truncate: false`.
  bool truncate = true;
};

// Which model family a config describes. gpt-oss differs from GPT-OSS-Lite
// in the places docs/model.md lists under "gpt-oss checkpoints": q/k/v/o,
// router and expert biases, unclamped sinks, the clamped SwiGLU, no shared
// expert, and the Hugging Face layout (tensor names, sharded files).
enum class ModelFamily {
  kGptOssLite,  // this project's own checkpoints (config.json + model.safetensors)
  kGptOss,      // Hugging Face gpt-oss (openai/gpt-oss-20b, -120b), hf_config.h
};

// How the routed experts' weights are stored.
enum class ExpertFormat {
  kDense,  // one tensor per projection, in the weights' dtype
  kMxfp4,  // FP4 e2m1 values in blocks of 32 with one e8m0 scale each
};

// Hard limits on the size fields, checked by ValidateModelConfig before
// anything is sized from them (the weight list, the KV cache, ...). They are
// far above any model this server is meant for (the 502M default uses
// vocab 128000, d_model 768, 12 layers), yet small enough that no product
// of them overflows int64 and no loader can be made to allocate absurd
// amounts from a few bytes of config.json.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;      // 4,194,304 ids
inline constexpr int64_t kMaxDModel = int64_t{1} << 16;         // 65,536
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHeads = 1024;                      // n_heads and n_kv_heads
inline constexpr int64_t kMaxHeadDim = 4096;
inline constexpr int64_t kMaxWindow = int64_t{1} << 24;         // 16M positions
inline constexpr int64_t kMaxExperts = 1024;                    // n_experts (top_k <= n_experts)
inline constexpr int64_t kMaxSharedExperts = 64;
inline constexpr int64_t kMaxExpertHidden = int64_t{1} << 18;   // 262,144
inline constexpr int64_t kMaxContext = int64_t{1} << 24;        // max_context, yarn.original_max_position
inline constexpr int64_t kMaxTotalParams = int64_t{1} << 40;    // ~1.1e12 parameters
inline constexpr size_t kMaxConfigNameBytes = 256;
// JSON nesting accepted from any file we load (config.json, the safetensors
// header, tokenizer.json): deeper text is refused by a byte scan before the
// parser sees it. Real files nest 3-5 levels.
inline constexpr int kMaxJsonDepth = 64;

// How the OpenAI chat endpoint turns `messages` into one prompt text
// (docs/model.md, "Chat template"): each message becomes its role's prefix,
// its content and its role's suffix, in order; then generation_prefix is
// appended (where the model's answer starts). Roles not listed are refused.
struct ChatTemplate {
  struct Role {
    std::string prefix;
    std::string suffix;
  };
  std::map<std::string, Role> roles;  // by role name: "system", "user", "assistant", ...
  std::string generation_prefix;
};

// How the OpenAI chat endpoint renders `messages` and reads the answer.
enum class ChatFormat {
  kTemplate,  // chat_template's role prefixes and suffixes (none: no chat)
  kHarmony,   // OpenAI's harmony format (gpt-oss): roles, channels and the
              // o200k_harmony special tokens; needs a BPE tokenizer with them
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kGptOssLite;
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
  // The sinks' clamp; gpt-oss: -inf and +inf (unclamped).
  double sink_clamp_lo = -10.0;
  double sink_clamp_hi = 15.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  int64_t max_context = 131072;
  TokenizerType tokenizer = TokenizerType::kByte;
  std::string tokenizer_file;  // for kBpe, relative to the model directory
  std::optional<int64_t> eos_token_id;
  // More ids that end generation beside eos_token_id (gpt-oss:
  // generation_config.json's eos_token_id list: <|return|>, <|call|>, ...).
  std::vector<int64_t> stop_token_ids;
  // kGptOss: gate <= swiglu_limit and |up| <= swiglu_limit in the experts.
  double swiglu_limit = 0;
  ExpertFormat expert_format = ExpertFormat::kDense;
  // For /v1/chat/completions: "chat_format" in config.json, "template"
  // (default) or "harmony".
  ChatFormat chat_format = ChatFormat::kTemplate;
  // kTemplate's template; a model without one cannot chat. Absent with
  // kHarmony.
  std::optional<ChatTemplate> chat_template;

  // True when `id` ends generation: eos_token_id or one of stop_token_ids.
  bool IsStopToken(int64_t id) const {
    if (eos_token_id && id == *eos_token_id) return true;
    for (int64_t s : stop_token_ids) {
      if (id == s) return true;
    }
    return false;
  }

  // Layer l is windowed iff l % 2 == 0 (docs/model.md).
  static bool IsWindowed(int64_t layer) { return layer % 2 == 0; }
  int64_t n_rep() const { return n_heads / n_kv_heads; }
  int64_t NumWindowedLayers() const { return (n_layers + 1) / 2; }
  int64_t NumGlobalLayers() const { return n_layers / 2; }

  // Exact parameter counts (embedding counted once when tied). Computed with
  // overflow checks: INT64_MAX when the count does not fit (only possible
  // for a config that ValidateModelConfig rejects).
  int64_t TotalParams() const;
  // Parameters touched per token: top_k of n_experts routed experts.
  int64_t ActiveParams() const;
  // K+V bytes one token adds to one layer at `bytes_per_element`.
  int64_t KvBytesPerTokenPerLayer(int64_t bytes_per_element) const {
    return 2 * n_kv_heads * head_dim * bytes_per_element;
  }

  // Serialises back to the canonical JSON (nested "yarn"). A kGptOss
  // config also writes what sets it apart ("family", "swiglu_limit", ...),
  // for its fingerprint; ParseModelConfig refuses those keys: gpt-oss
  // configs are read from their Hugging Face config.json.
  std::string ToJson() const;
};

// Parses and validates. Errors are InvalidArgument naming the bad field and
// the value found, e.g. "config field 'n_heads' (6) must be a multiple of
// 'n_kv_heads' (4)".
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);

// Reads a file and parses it; NotFound when the file cannot be read. A
// Hugging Face config.json (one with "model_type") goes to
// ParseHfGptOssConfig (hf_config.h), with the generation_config.json beside
// it when there is one.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Checks the invariants the math needs and the hard limits above. Returns
// InvalidArgument naming the field and the value on failure.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Shared by the JSON loaders (config.json, safetensors header,
// tokenizer.json).
//
// InvalidArgument "<what> nests JSON deeper than <max_depth> levels ..." when
// `text`, scanned as bytes (brackets inside strings ignored), opens more than
// `max_depth` arrays/objects at once. Cheap and allocation-free, so it runs
// before the parser: nlohmann's parser and dump() recurse per level.
absl::Status CheckJsonNesting(absl::string_view text, int max_depth, absl::string_view what);
// A JSON value for an error message: at most `max_chars` characters (then
// "..."), without serialising the whole value.
std::string JsonExcerpt(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace pdserve
