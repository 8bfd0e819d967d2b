#include "common/model/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model/json_field.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

// Keys read below, and keys that do not change the math.
constexpr const char* kReadKeys[] = {
    "model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok",
    "experts_per_token", "sliding_window", "layer_types", "max_position_embeddings", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "tie_word_embeddings", "hidden_act", "attention_bias", "swiglu_limit",
    "swiglu_alpha", "quantization_config", "eos_token_id",
};
constexpr const char* kNoMathKeys[] = {
    "attention_dropout", "initializer_range", "router_aux_loss_coef", "output_router_logits", "use_cache",
    "transformers_version", "torch_dtype", "dtype", "pad_token_id", "bos_token_id", "_name_or_path",
    "initial_context_length",  // the trained context: rope_scaling's original_max_position_embeddings says it
};

bool Listed(const std::string& key) {
  auto is = [&](const char* k) { return key == k; };
  return std::any_of(std::begin(kReadKeys), std::end(kReadKeys), is) ||
         std::any_of(std::begin(kNoMathKeys), std::end(kNoMathKeys), is);
}

absl::Status CheckKeys(const json& j) {
  for (const auto& [key, value] : j.items()) {
    if (!Listed(key)) {
      return Bad(absl::StrCat("gpt-oss config.json key '", key.substr(0, 64), "' (", JsonExcerpt(value),
                              ") is not one pdserve implements; it may change the math, so the model is refused"));
    }
  }
  return absl::OkStatus();
}

absl::Status Require(const json& j, const char* key, int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) return Bad(absl::StrCat("gpt-oss config.json lacks '", key, "'"));
  return ReadField(j, key, key, out);
}

// The sizes, with the published aliases.
absl::Status ReadSizes(const json& j, ModelConfig* c) {
  RETURN_IF_ERROR(Require(j, "vocab_size", &c->vocab_size));
  RETURN_IF_ERROR(Require(j, "hidden_size", &c->d_model));
  RETURN_IF_ERROR(Require(j, "intermediate_size", &c->expert_hidden));
  RETURN_IF_ERROR(Require(j, "num_hidden_layers", &c->n_layers));
  RETURN_IF_ERROR(Require(j, "num_attention_heads", &c->n_heads));
  RETURN_IF_ERROR(Require(j, "num_key_value_heads", &c->n_kv_heads));
  RETURN_IF_ERROR(Require(j, "head_dim", &c->head_dim));
  RETURN_IF_ERROR(Require(j, "num_local_experts", &c->n_experts));
  int64_t per_tok = -1, per_token = -1;
  RETURN_IF_ERROR(ReadField(j, "num_experts_per_tok", "num_experts_per_tok", &per_tok));
  RETURN_IF_ERROR(ReadField(j, "experts_per_token", "experts_per_token", &per_token));
  if (per_tok < 0 && per_token < 0) {
    return Bad("gpt-oss config.json lacks 'num_experts_per_tok' (or 'experts_per_token')");
  }
  if (per_tok >= 0 && per_token >= 0 && per_tok != per_token) {
    return Bad(absl::StrCat("gpt-oss config.json says 'num_experts_per_tok' ", per_tok, " but 'experts_per_token' ",
                            per_token));
  }
  c->top_k = per_tok >= 0 ? per_tok : per_token;
  c->window = 128;
  RETURN_IF_ERROR(ReadField(j, "sliding_window", "sliding_window", &c->window));
  c->max_context = 131072;
  return ReadField(j, "max_position_embeddings", "max_position_embeddings", &c->max_context);
}

// rope_scaling (or rope_parameters): YaRN only, with the keys pdserve uses.
absl::Status ReadRope(const json& j, ModelConfig* c) {
  c->rope_theta = 150000.0;
  RETURN_IF_ERROR(ReadField(j, "rope_theta", "rope_theta", &c->rope_theta));
  c->yarn = YarnConfig{32.0, 4096, 32.0, 1.0, /*truncate=*/false};
  const char* name = j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (j.contains("rope_parameters") && j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    return Bad("gpt-oss config.json has both 'rope_scaling' and 'rope_parameters': which one holds is ambiguous");
  }
  if (!j.contains(name) || j[name].is_null()) return absl::OkStatus();
  const json& r = j[name];
  if (!r.is_object()) {
    return Bad(absl::StrCat("gpt-oss config.json '", name, "' must be an object, found ", JsonExcerpt(r)));
  }
  for (const auto& item : r.items()) {
    static const char* kRopeKeys[] = {"rope_type", "type", "factor", "original_max_position_embeddings",
                                      "beta_fast", "beta_slow", "truncate", "rope_theta"};
    const std::string& key = item.key();
    if (std::none_of(std::begin(kRopeKeys), std::end(kRopeKeys), [&](const char* k) { return key == k; })) {
      return Bad(absl::StrCat("gpt-oss config.json '", name, ".", key.substr(0, 64), "' (", JsonExcerpt(item.value()),
                              ") is not implemented: pdserve's YaRN reads factor, original_max_position_embeddings, "
                              "beta_fast, beta_slow and truncate"));
    }
  }
  std::string type = "yarn";
  const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
  RETURN_IF_ERROR(ReadField(r, type_key, absl::StrCat(name, ".", type_key), &type));
  if (type != "yarn") {
    return Bad(absl::StrCat("gpt-oss config.json '", name, ".rope_type' is \"", type.substr(0, 64),
                            "\"; pdserve implements \"yarn\""));
  }
  const std::string p = absl::StrCat(name, ".");
  RETURN_IF_ERROR(ReadField(r, "rope_theta", p + "rope_theta", &c->rope_theta));
  RETURN_IF_ERROR(ReadField(r, "factor", p + "factor", &c->yarn.factor));
  RETURN_IF_ERROR(ReadField(r, "original_max_position_embeddings", p + "original_max_position_embeddings",
                            &c->yarn.original_max_position));
  RETURN_IF_ERROR(ReadField(r, "beta_fast", p + "beta_fast", &c->yarn.beta_fast));
  RETURN_IF_ERROR(ReadField(r, "beta_slow", p + "beta_slow", &c->yarn.beta_slow));
  return ReadField(r, "truncate", p + "truncate", &c->yarn.truncate);
}

// layer_types must be the pattern pdserve implements: even layers sliding.
absl::Status CheckLayerTypes(const json& j, const ModelConfig& c) {
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return absl::OkStatus();
  const json& t = j["layer_types"];
  if (!t.is_array() || static_cast<int64_t>(t.size()) != c.n_layers) {
    return Bad(absl::StrCat("gpt-oss config.json 'layer_types' must list the ", c.n_layers, " layers, found ",
                            JsonExcerpt(t)));
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const char* want = ModelConfig::IsWindowed(l) ? "sliding_attention" : "full_attention";
    if (t[l] != want) {
      return Bad(absl::StrCat("gpt-oss config.json 'layer_types[", l, "]' is ", JsonExcerpt(t[l]),
                              "; pdserve implements even layers sliding and odd layers full, so it must be \"",
                              want, "\""));
    }
  }
  return absl::OkStatus();
}

// The published MXFP4 scheme: experts in MXFP4, these modules in bf16.
absl::Status ReadQuantization(const json& j, ModelConfig* c) {
  c->expert_format = ExpertFormat::kDense;
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return absl::OkStatus();
  const json& q = j["quantization_config"];
  std::string method;
  if (q.is_object()) RETURN_IF_ERROR(ReadField(q, "quant_method", "quantization_config.quant_method", &method));
  if (method != "mxfp4") {
    return Bad(absl::StrCat("gpt-oss config.json 'quantization_config' ", JsonExcerpt(q),
                            " is not implemented: pdserve reads quant_method \"mxfp4\" only"));
  }
  static const char* kKept[] = {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                "lm_head"};
  for (const auto& [key, value] : q.items()) {
    if (key == "quant_method") continue;
    if (key != "modules_to_not_convert" || !value.is_array()) {
      return Bad(absl::StrCat("gpt-oss config.json 'quantization_config.", key.substr(0, 64), "' (",
                              JsonExcerpt(value), ") is not implemented"));
    }
    for (const json& m : value) {
      if (std::none_of(std::begin(kKept), std::end(kKept), [&](const char* k) { return m == k; })) {
        return Bad(absl::StrCat("gpt-oss config.json 'quantization_config.modules_to_not_convert' names ",
                                JsonExcerpt(m), "; pdserve implements MXFP4 experts with these in bf16: ",
                                absl::StrJoin(kKept, ", ")));
      }
    }
  }
  c->expert_format = ExpertFormat::kMxfp4;
  return absl::OkStatus();
}

// Keys whose one implemented value is checked.
absl::Status CheckFixedMath(const json& j, ModelConfig* c) {
  if (j["model_type"] != "gpt_oss") {
    return Bad(absl::StrCat("config.json 'model_type' is ", JsonExcerpt(j["model_type"]),
                            "; pdserve serves Hugging Face checkpoints of model_type \"gpt_oss\" only"));
  }
  if (j.contains("architectures") && j["architectures"] != json::array({"GptOssForCausalLM"})) {
    return Bad(absl::StrCat("gpt-oss config.json 'architectures' is ", JsonExcerpt(j["architectures"]),
                            "; pdserve serves [\"GptOssForCausalLM\"]"));
  }
  std::string act = "silu";
  RETURN_IF_ERROR(ReadField(j, "hidden_act", "hidden_act", &act));
  if (act != "silu") {
    return Bad(absl::StrCat("gpt-oss config.json 'hidden_act' is \"", act.substr(0, 64),
                            "\"; pdserve implements \"silu\""));
  }
  bool bias = true;
  RETURN_IF_ERROR(ReadField(j, "attention_bias", "attention_bias", &bias));
  if (!bias) return Bad("gpt-oss config.json 'attention_bias' is false; pdserve implements gpt-oss's biased q/k/v/o");
  c->swiglu_limit = 7.0;
  RETURN_IF_ERROR(ReadField(j, "swiglu_limit", "swiglu_limit", &c->swiglu_limit));
  if (!(c->swiglu_limit > 0)) {
    return Bad(absl::StrCat("gpt-oss config.json 'swiglu_limit' must be > 0, found ", c->swiglu_limit));
  }
  double alpha = 1.702;  // transformers 5 writes it; the published math fixes it
  RETURN_IF_ERROR(ReadField(j, "swiglu_alpha", "swiglu_alpha", &alpha));
  if (alpha != 1.702) {
    return Bad(absl::StrCat("gpt-oss config.json 'swiglu_alpha' is ", alpha, "; pdserve implements 1.702"));
  }
  c->norm_eps = 1e-5;
  RETURN_IF_ERROR(ReadField(j, "rms_norm_eps", "rms_norm_eps", &c->norm_eps));
  c->tie_embeddings = false;
  return ReadField(j, "tie_word_embeddings", "tie_word_embeddings", &c->tie_embeddings);
}

// eos_token_id: an id or a list of ids; each one ends generation.
absl::Status AddStops(const json& j, const std::string& where, ModelConfig* c) {
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return absl::OkStatus();
  const json& e = j["eos_token_id"];
  const json ids = e.is_array() ? e : json::array({e});
  if (ids.size() > 64) return Bad(absl::StrCat(where, " 'eos_token_id' lists ", ids.size(), " ids, at most 64"));
  for (const json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c->vocab_size) {
      return Bad(absl::StrCat(where, " 'eos_token_id' holds ", JsonExcerpt(id), ", not an id below vocab_size ",
                              c->vocab_size));
    }
    const int64_t v = id.get<int64_t>();
    if (!c->eos_token_id) {
      c->eos_token_id = v;
    } else if (v != *c->eos_token_id &&
               std::find(c->stop_token_ids.begin(), c->stop_token_ids.end(), v) == c->stop_token_ids.end()) {
      c->stop_token_ids.push_back(v);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<json> ParseObject(absl::string_view text, const char* what) {
  RETURN_IF_ERROR(CheckJsonNesting(text, kMaxJsonDepth, what));
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad(absl::StrCat(what, " is not a JSON object"));
  return j;
}

}  // namespace

bool IsHfConfig(absl::string_view json_text) {
  if (!CheckJsonNesting(json_text, kMaxJsonDepth, "config").ok()) return false;
  const json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("model_type");
}

absl::StatusOr<ModelConfig> ParseHfGptOssConfig(absl::string_view config_json,
                                                absl::string_view generation_config_json) {
  ASSIGN_OR_RETURN(const json j, ParseObject(config_json, "gpt-oss config.json"));
  if (!j.contains("model_type")) return Bad("gpt-oss config.json lacks 'model_type'");
  ModelConfig c;
  c.family = ModelFamily::kGptOss;
  c.name = "gpt-oss";
  RETURN_IF_ERROR(CheckFixedMath(j, &c));  // model_type first: its error explains the rest
  RETURN_IF_ERROR(CheckKeys(j));
  RETURN_IF_ERROR(ReadSizes(j, &c));
  c.name = absl::StrCat("gpt-oss-", c.n_layers, "l-", c.n_experts, "e");
  RETURN_IF_ERROR(ReadRope(j, &c));
  RETURN_IF_ERROR(CheckLayerTypes(j, c));
  RETURN_IF_ERROR(ReadQuantization(j, &c));
  c.n_shared_experts = 0;
  c.rope_identity_pairs_global = 0;
  c.sink_clamp_lo = -std::numeric_limits<double>::infinity();
  c.sink_clamp_hi = std::numeric_limits<double>::infinity();
  c.tokenizer = TokenizerType::kBpe;
  c.tokenizer_file = "tokenizer.json";
  c.chat_format = ChatFormat::kHarmony;
  RETURN_IF_ERROR(ValidateModelConfig(c));  // sizes checked before the stops index by them
  RETURN_IF_ERROR(AddStops(j, "gpt-oss config.json", &c));
  if (!generation_config_json.empty()) {
    ASSIGN_OR_RETURN(const json g, ParseObject(generation_config_json, "generation_config.json"));
    RETURN_IF_ERROR(AddStops(g, "generation_config.json", &c));
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadHfGptOssConfig(absl::string_view config_json, const std::string& dir) {
  const std::filesystem::path gen = std::filesystem::path(dir) / "generation_config.json";
  std::string gen_text;
  std::error_code ec;
  if (std::filesystem::exists(gen, ec)) {
    std::ifstream in(gen);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", gen.string()));
    std::stringstream ss;
    ss << in.rdbuf();
    gen_text = ss.str();
  }
  return ParseHfGptOssConfig(config_json, gen_text);
}

}  // namespace pdserve
