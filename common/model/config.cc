#include "common/model/config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using nlohmann::json;

// Reads `key` from `obj` into `out` when present. A present key with the
// wrong JSON type is an error naming the field.
template <typename T>
absl::Status ReadField(const json& obj, const std::string& key,
                       const std::string& path, T* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!it->is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config field '", path, "' must be an integer, found ", it->dump()));
      }
    }
    *out = it->get<T>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field '", path, "' has the wrong type: found ", it->dump()));
  }
  return absl::OkStatus();
}

absl::Status RequirePositive(int64_t v, const char* field) {
  if (v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", field, "' must be > 0, found ", v));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelConfig::TotalParams() const {
  const int64_t D = d_model, F = expert_hidden;
  const int64_t attn = n_heads * head_dim * D          // q_proj
                       + 2 * n_kv_heads * head_dim * D  // kv_proj
                       + D * n_heads * head_dim         // o_proj
                       + n_heads;                       // sink_bias
  const int64_t mlp = 3 * F * D;
  const int64_t layer = 2 * D + attn + n_experts * D + (n_experts + n_shared_experts) * mlp;
  const int64_t embed = vocab_size * D * (tie_embeddings ? 1 : 2);
  return embed + n_layers * layer + D;
}

int64_t ModelConfig::ActiveParams() const {
  const int64_t inactive = (n_experts - top_k) * 3 * expert_hidden * d_model;
  return TotalParams() - n_layers * inactive;
}

std::string ModelConfig::ToJson() const {
  json j;
  j["name"] = name;
  j["vocab_size"] = vocab_size;
  j["d_model"] = d_model;
  j["n_layers"] = n_layers;
  j["n_heads"] = n_heads;
  j["n_kv_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["window"] = window;
  j["n_experts"] = n_experts;
  j["top_k"] = top_k;
  j["n_shared_experts"] = n_shared_experts;
  j["expert_hidden"] = expert_hidden;
  j["rope_theta"] = rope_theta;
  j["yarn"] = {{"factor", yarn.factor},
               {"original_max_position", yarn.original_max_position},
               {"beta_fast", yarn.beta_fast},
               {"beta_slow", yarn.beta_slow}};
  j["rope_identity_pairs_global"] = rope_identity_pairs_global;
  j["sink_clamp"] = {sink_clamp_lo, sink_clamp_hi};
  j["norm_eps"] = norm_eps;
  j["tie_embeddings"] = tie_embeddings;
  j["max_context"] = max_context;
  switch (tokenizer) {
    case TokenizerType::kByte: j["tokenizer"] = {{"type", "byte"}}; break;
    case TokenizerType::kChar: j["tokenizer"] = {{"type", "char"}}; break;
    case TokenizerType::kBpe:
      j["tokenizer"] = {{"type", "bpe"}, {"file", tokenizer_file}};
      break;
  }
  if (eos_token_id) j["eos_token_id"] = *eos_token_id;
  return j.dump(2);
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  RETURN_IF_ERROR(RequirePositive(c.vocab_size, "vocab_size"));
  RETURN_IF_ERROR(RequirePositive(c.d_model, "d_model"));
  RETURN_IF_ERROR(RequirePositive(c.n_layers, "n_layers"));
  RETURN_IF_ERROR(RequirePositive(c.n_heads, "n_heads"));
  RETURN_IF_ERROR(RequirePositive(c.n_kv_heads, "n_kv_heads"));
  RETURN_IF_ERROR(RequirePositive(c.head_dim, "head_dim"));
  RETURN_IF_ERROR(RequirePositive(c.window, "window"));
  RETURN_IF_ERROR(RequirePositive(c.n_experts, "n_experts"));
  RETURN_IF_ERROR(RequirePositive(c.top_k, "top_k"));
  RETURN_IF_ERROR(RequirePositive(c.expert_hidden, "expert_hidden"));
  RETURN_IF_ERROR(RequirePositive(c.max_context, "max_context"));
  auto bad = [](const std::string& msg) { return absl::InvalidArgumentError(msg); };
  if (c.n_heads % c.n_kv_heads != 0) {
    return bad(absl::StrCat("config field 'n_heads' (", c.n_heads,
                            ") must be a multiple of 'n_kv_heads' (", c.n_kv_heads, ")"));
  }
  if (c.head_dim % 2 != 0) {
    return bad(absl::StrCat("config field 'head_dim' (", c.head_dim,
                            ") must be even: RoPE rotates pairs (i, i + d/2)"));
  }
  if (c.top_k > c.n_experts) {
    return bad(absl::StrCat("config field 'top_k' (", c.top_k,
                            ") must be <= 'n_experts' (", c.n_experts, ")"));
  }
  if (c.n_shared_experts < 0) {
    return bad(absl::StrCat("config field 'n_shared_experts' must be >= 0, found ",
                            c.n_shared_experts));
  }
  if (c.rope_identity_pairs_global < 0 || c.rope_identity_pairs_global > c.head_dim / 2) {
    return bad(absl::StrCat("config field 'rope_identity_pairs_global' (",
                            c.rope_identity_pairs_global, ") must be in [0, head_dim/2 = ",
                            c.head_dim / 2, "]"));
  }
  if (!(c.rope_theta > 1.0)) {
    return bad(absl::StrCat("config field 'rope_theta' must be > 1, found ", c.rope_theta));
  }
  if (!(c.yarn.factor >= 1.0)) {
    return bad(absl::StrCat("config field 'yarn.factor' must be >= 1, found ", c.yarn.factor));
  }
  if (c.yarn.original_max_position <= 0) {
    return bad(absl::StrCat("config field 'yarn.original_max_position' must be > 0, found ",
                            c.yarn.original_max_position));
  }
  if (!(c.yarn.beta_fast > 0) || !(c.yarn.beta_slow > 0)) {
    return bad(absl::StrCat("config fields 'yarn.beta_fast' (", c.yarn.beta_fast,
                            ") and 'yarn.beta_slow' (", c.yarn.beta_slow, ") must be > 0"));
  }
  if (!(c.sink_clamp_lo <= c.sink_clamp_hi)) {
    return bad(absl::StrCat("config field 'sink_clamp' must be [lo, hi] with lo <= hi, found [",
                            c.sink_clamp_lo, ", ", c.sink_clamp_hi, "]"));
  }
  if (!(c.norm_eps > 0)) {
    return bad(absl::StrCat("config field 'norm_eps' must be > 0, found ", c.norm_eps));
  }
  if (c.eos_token_id && (*c.eos_token_id < 0 || *c.eos_token_id >= c.vocab_size)) {
    return bad(absl::StrCat("config field 'eos_token_id' (", *c.eos_token_id,
                            ") must be in [0, vocab_size = ", c.vocab_size, ")"));
  }
  if (c.tokenizer == TokenizerType::kBpe && c.tokenizer_file.empty()) {
    return bad("config field 'tokenizer.file' is required when tokenizer.type is 'bpe'");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("model config is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("model config must be a JSON object");

  ModelConfig c;
  RETURN_IF_ERROR(ReadField(j, "name", "name", &c.name));
  RETURN_IF_ERROR(ReadField(j, "vocab_size", "vocab_size", &c.vocab_size));
  RETURN_IF_ERROR(ReadField(j, "d_model", "d_model", &c.d_model));
  RETURN_IF_ERROR(ReadField(j, "n_layers", "n_layers", &c.n_layers));
  RETURN_IF_ERROR(ReadField(j, "n_heads", "n_heads", &c.n_heads));
  RETURN_IF_ERROR(ReadField(j, "n_kv_heads", "n_kv_heads", &c.n_kv_heads));
  RETURN_IF_ERROR(ReadField(j, "head_dim", "head_dim", &c.head_dim));
  RETURN_IF_ERROR(ReadField(j, "window", "window", &c.window));
  RETURN_IF_ERROR(ReadField(j, "n_experts", "n_experts", &c.n_experts));
  RETURN_IF_ERROR(ReadField(j, "top_k", "top_k", &c.top_k));
  RETURN_IF_ERROR(ReadField(j, "n_shared_experts", "n_shared_experts", &c.n_shared_experts));
  RETURN_IF_ERROR(ReadField(j, "expert_hidden", "expert_hidden", &c.expert_hidden));
  RETURN_IF_ERROR(ReadField(j, "rope_theta", "rope_theta", &c.rope_theta));
  RETURN_IF_ERROR(ReadField(j, "rope_identity_pairs_global", "rope_identity_pairs_global",
                            &c.rope_identity_pairs_global));
  RETURN_IF_ERROR(ReadField(j, "norm_eps", "norm_eps", &c.norm_eps));
  RETURN_IF_ERROR(ReadField(j, "tie_embeddings", "tie_embeddings", &c.tie_embeddings));
  RETURN_IF_ERROR(ReadField(j, "max_context", "max_context", &c.max_context));

  // YaRN: nested object, or flat "yarn_*" keys.
  if (auto it = j.find("yarn"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field 'yarn' must be an object, found ", it->dump()));
    }
    RETURN_IF_ERROR(ReadField(*it, "factor", "yarn.factor", &c.yarn.factor));
    RETURN_IF_ERROR(ReadField(*it, "original_max_position", "yarn.original_max_position",
                              &c.yarn.original_max_position));
    RETURN_IF_ERROR(ReadField(*it, "original_max_position_embeddings",
                              "yarn.original_max_position_embeddings",
                              &c.yarn.original_max_position));
    RETURN_IF_ERROR(ReadField(*it, "beta_fast", "yarn.beta_fast", &c.yarn.beta_fast));
    RETURN_IF_ERROR(ReadField(*it, "beta_slow", "yarn.beta_slow", &c.yarn.beta_slow));
  }
  RETURN_IF_ERROR(ReadField(j, "yarn_factor", "yarn_factor", &c.yarn.factor));
  RETURN_IF_ERROR(ReadField(j, "yarn_original_max_position", "yarn_original_max_position",
                            &c.yarn.original_max_position));
  RETURN_IF_ERROR(ReadField(j, "yarn_beta_fast", "yarn_beta_fast", &c.yarn.beta_fast));
  RETURN_IF_ERROR(ReadField(j, "yarn_beta_slow", "yarn_beta_slow", &c.yarn.beta_slow));

  if (auto it = j.find("sink_clamp"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number() || !(*it)[1].is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'sink_clamp' must be [lo, hi] numbers, found ", it->dump()));
    }
    c.sink_clamp_lo = (*it)[0].get<double>();
    c.sink_clamp_hi = (*it)[1].get<double>();
  }

  if (auto it = j.find("tokenizer"); it != j.end() && !it->is_null()) {
    std::string type;
    if (it->is_string()) {
      type = it->get<std::string>();
    } else if (it->is_object()) {
      RETURN_IF_ERROR(ReadField(*it, "type", "tokenizer.type", &type));
      RETURN_IF_ERROR(ReadField(*it, "file", "tokenizer.file", &c.tokenizer_file));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'tokenizer' must be an object like {\"type\": \"bpe\"}, found ",
          it->dump()));
    }
    if (type == "byte" || type.empty()) {
      c.tokenizer = TokenizerType::kByte;
    } else if (type == "char") {
      c.tokenizer = TokenizerType::kChar;
    } else if (type == "bpe") {
      c.tokenizer = TokenizerType::kBpe;
      if (c.tokenizer_file.empty()) c.tokenizer_file = "tokenizer.json";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'tokenizer.type' must be byte, char or bpe, found '", type, "'"));
    }
  }

  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field 'eos_token_id' must be an integer or null, found ", it->dump()));
    }
    c.eos_token_id = it->get<int64_t>();
  }

  RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read model config '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto config = ParseModelConfig(ss.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace pdserve
