#include "common/model/config.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/model/hf_config.h"
#include "common/model/json_field.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using nlohmann::json;

absl::Status RequirePositive(int64_t v, const char* field) {
  if (v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", field, "' must be > 0, found ", v));
  }
  return absl::OkStatus();
}

// 1 <= v <= max, checked before anything is sized from the field.
absl::Status RequireInRange(int64_t v, int64_t max, const char* field) {
  if (v <= 0 || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field '", field, "' must be in [1, ", max, "], found ", v));
  }
  return absl::OkStatus();
}

// Overflow-checked int64 arithmetic: once `ok` is false it stays false.
struct Checked {
  bool ok = true;
  int64_t Mul(int64_t a, int64_t b) {
    int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) ok = false;
    return r;
  }
  int64_t Add(int64_t a, int64_t b) {
    int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) ok = false;
    return r;
  }
  int64_t Sub(int64_t a, int64_t b) {
    int64_t r = 0;
    if (__builtin_sub_overflow(a, b, &r)) ok = false;
    return r;
  }
};

// A gpt-oss layer's biases: q, k, v and o, the router, and each expert's
// gate|up and down; 0 for other families.
int64_t GptOssLayerBiases(const ModelConfig& m, Checked& c) {
  if (m.family != ModelFamily::kGptOss) return 0;
  const int64_t attn = c.Add(c.Mul(c.Add(m.n_heads, c.Mul(2, m.n_kv_heads)), m.head_dim), m.d_model);
  return c.Add(c.Add(attn, m.n_experts), c.Mul(m.n_experts, c.Add(c.Mul(2, m.expert_hidden), m.d_model)));
}

// The config's plain fields, in one table that both ToJson and
// ParseModelConfig walk: the JSON key and the member it fills. sink_clamp,
// tokenizer and eos_token_id have shapes of their own and are handled apart.
template <typename S>
struct Field {
  const char* key;
  std::variant<std::string S::*, int64_t S::*, double S::*, bool S::*> member;
};

const Field<ModelConfig> kModelFields[] = {
    {"name", &ModelConfig::name},
    {"vocab_size", &ModelConfig::vocab_size},
    {"d_model", &ModelConfig::d_model},
    {"n_layers", &ModelConfig::n_layers},
    {"n_heads", &ModelConfig::n_heads},
    {"n_kv_heads", &ModelConfig::n_kv_heads},
    {"head_dim", &ModelConfig::head_dim},
    {"window", &ModelConfig::window},
    {"n_experts", &ModelConfig::n_experts},
    {"top_k", &ModelConfig::top_k},
    {"n_shared_experts", &ModelConfig::n_shared_experts},
    {"expert_hidden", &ModelConfig::expert_hidden},
    {"rope_theta", &ModelConfig::rope_theta},
    {"rope_identity_pairs_global", &ModelConfig::rope_identity_pairs_global},
    {"norm_eps", &ModelConfig::norm_eps},
    {"tie_embeddings", &ModelConfig::tie_embeddings},
    {"max_context", &ModelConfig::max_context},
};

// Written nested as "yarn": {...}; read nested or as flat "yarn_<key>".
const Field<YarnConfig> kYarnFields[] = {
    {"factor", &YarnConfig::factor},
    {"original_max_position", &YarnConfig::original_max_position},
    {"beta_fast", &YarnConfig::beta_fast},
    {"beta_slow", &YarnConfig::beta_slow},
};

template <typename S, size_t N>
json WriteFields(const S& s, const Field<S> (&fields)[N]) {
  json j = json::object();
  for (const Field<S>& f : fields) {
    std::visit([&](auto member) { j[f.key] = s.*member; }, f.member);
  }
  return j;
}

// Reads each field present in `obj` under key_prefix + key; errors name the
// field as path_prefix + key.
template <typename S, size_t N>
absl::Status ReadFields(const json& obj, const Field<S> (&fields)[N], absl::string_view key_prefix,
                        absl::string_view path_prefix, S* s) {
  for (const Field<S>& f : fields) {
    const std::string key = absl::StrCat(key_prefix, f.key);
    const std::string path = absl::StrCat(path_prefix, f.key);
    RETURN_IF_ERROR(std::visit([&](auto member) { return ReadField(obj, key, path, &(s->*member)); }, f.member));
  }
  return absl::OkStatus();
}

void ExcerptInto(const json& j, std::string* out, size_t limit, int depth) {
  if (out->size() > limit) return;
  if (depth > 8) {  // deep values are elided, not walked
    out->append("...");
    return;
  }
  if (j.is_object()) {
    out->push_back('{');
    bool first = true;
    for (auto it = j.begin(); it != j.end() && out->size() <= limit; ++it) {
      if (!first) out->push_back(',');
      first = false;
      out->append(json(it.key().substr(0, limit)).dump(-1, ' ', false, json::error_handler_t::replace));
      out->push_back(':');
      ExcerptInto(it.value(), out, limit, depth + 1);
    }
    out->push_back('}');
  } else if (j.is_array()) {
    out->push_back('[');
    bool first = true;
    for (auto it = j.begin(); it != j.end() && out->size() <= limit; ++it) {
      if (!first) out->push_back(',');
      first = false;
      ExcerptInto(*it, out, limit, depth + 1);
    }
    out->push_back(']');
  } else if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    out->append(json(s.substr(0, limit)).dump(-1, ' ', false, json::error_handler_t::replace));
  } else {
    out->append(j.dump());  // a number, bool or null: short
  }
}

}  // namespace

absl::Status CheckJsonNesting(absl::string_view text, int max_depth, absl::string_view what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skip the escaped character (\" and \\ included)
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return absl::InvalidArgumentError(absl::StrCat(what, " nests JSON deeper than ", max_depth,
                                                       " levels (at byte ", i, ")"));
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;  // unbalanced text is the parser's to reject
    }
  }
  return absl::OkStatus();
}

std::string JsonExcerpt(const json& value, size_t max_chars) {
  std::string out;
  ExcerptInto(value, &out, max_chars, 0);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    // Never end inside a UTF-8 character: drop continuation bytes, then
    // the lead byte they belonged to.
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
    out.append("...");
  }
  return out;
}

int64_t ModelConfig::TotalParams() const {
  Checked c;
  const int64_t D = d_model, F = expert_hidden;
  const int64_t hd = c.Mul(head_dim, D);
  const int64_t attn = c.Add(c.Add(c.Mul(n_heads, hd),                       // q_proj
                                   c.Mul(c.Mul(2, n_kv_heads), hd)),         // kv_proj
                             c.Add(c.Mul(n_heads, hd),                       // o_proj
                                   n_heads));                                // sink_bias
  const int64_t mlp = c.Mul(c.Mul(3, F), D);
  const int64_t layer = c.Add(c.Add(c.Add(c.Add(c.Mul(2, D), attn), c.Mul(n_experts, D)),
                                    c.Mul(c.Add(n_experts, n_shared_experts), mlp)),
                              GptOssLayerBiases(*this, c));
  const int64_t embed = c.Mul(c.Mul(vocab_size, D), tie_embeddings ? 1 : 2);
  const int64_t total = c.Add(c.Add(embed, c.Mul(n_layers, layer)), D);
  return c.ok ? total : std::numeric_limits<int64_t>::max();
}

int64_t ModelConfig::ActiveParams() const {
  Checked c;
  // An expert's weights, and under gpt-oss its gate|up and down biases.
  const int64_t expert = c.Add(c.Mul(c.Mul(3, expert_hidden), d_model),
                               family == ModelFamily::kGptOss ? c.Add(c.Mul(2, expert_hidden), d_model) : 0);
  const int64_t inactive = c.Mul(c.Sub(n_experts, top_k), expert);
  const int64_t total = TotalParams();
  const int64_t active = c.Sub(total, c.Mul(n_layers, inactive));
  return c.ok && total != std::numeric_limits<int64_t>::max() ? active : std::numeric_limits<int64_t>::max();
}

std::string ModelConfig::ToJson() const {
  json j = WriteFields(*this, kModelFields);
  j["yarn"] = WriteFields(yarn, kYarnFields);
  j["sink_clamp"] = {sink_clamp_lo, sink_clamp_hi};
  switch (tokenizer) {
    case TokenizerType::kByte: j["tokenizer"] = {{"type", "byte"}}; break;
    case TokenizerType::kChar: j["tokenizer"] = {{"type", "char"}}; break;
    case TokenizerType::kBpe:
      j["tokenizer"] = {{"type", "bpe"}, {"file", tokenizer_file}};
      break;
  }
  if (eos_token_id) j["eos_token_id"] = *eos_token_id;
  if (chat_format == ChatFormat::kHarmony) j["chat_format"] = "harmony";
  if (family == ModelFamily::kGptOss) {
    j["family"] = "gpt_oss";
    j["swiglu_limit"] = swiglu_limit;
    j["expert_format"] = expert_format == ExpertFormat::kMxfp4 ? "mxfp4" : "dense";
    j["stop_token_ids"] = stop_token_ids;
    j["yarn"]["truncate"] = yarn.truncate;
  }
  if (chat_template) {
    json t = {{"generation_prefix", chat_template->generation_prefix}};
    for (const auto& [role, r] : chat_template->roles) t["roles"][role] = {{"prefix", r.prefix}, {"suffix", r.suffix}};
    j["chat_template"] = std::move(t);
  }
  return j.dump(2);
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  // Sizes first, against the hard limits in config.h: every later check and
  // every caller may multiply them.
  RETURN_IF_ERROR(RequireInRange(c.vocab_size, kMaxVocabSize, "vocab_size"));
  RETURN_IF_ERROR(RequireInRange(c.d_model, kMaxDModel, "d_model"));
  RETURN_IF_ERROR(RequireInRange(c.n_layers, kMaxLayers, "n_layers"));
  RETURN_IF_ERROR(RequireInRange(c.n_heads, kMaxHeads, "n_heads"));
  RETURN_IF_ERROR(RequireInRange(c.n_kv_heads, kMaxHeads, "n_kv_heads"));
  RETURN_IF_ERROR(RequireInRange(c.head_dim, kMaxHeadDim, "head_dim"));
  RETURN_IF_ERROR(RequireInRange(c.window, kMaxWindow, "window"));
  RETURN_IF_ERROR(RequireInRange(c.n_experts, kMaxExperts, "n_experts"));
  RETURN_IF_ERROR(RequirePositive(c.top_k, "top_k"));
  RETURN_IF_ERROR(RequireInRange(c.expert_hidden, kMaxExpertHidden, "expert_hidden"));
  RETURN_IF_ERROR(RequireInRange(c.max_context, kMaxContext, "max_context"));
  auto bad = [](const std::string& msg) { return absl::InvalidArgumentError(msg); };
  if (c.n_shared_experts < 0 || c.n_shared_experts > kMaxSharedExperts) {
    return bad(absl::StrCat("config field 'n_shared_experts' must be in [0, ", kMaxSharedExperts, "], found ",
                            c.n_shared_experts));
  }
  if (c.yarn.original_max_position <= 0 || c.yarn.original_max_position > kMaxContext) {
    return bad(absl::StrCat("config field 'yarn.original_max_position' must be in [1, ", kMaxContext,
                            "], found ", c.yarn.original_max_position));
  }
  if (c.name.size() > kMaxConfigNameBytes) {
    return bad(absl::StrCat("config field 'name' is ", c.name.size(), " bytes, at most ", kMaxConfigNameBytes,
                            " are allowed"));
  }
  if (c.tokenizer_file.size() > 4096) {
    return bad(absl::StrCat("config field 'tokenizer.file' is ", c.tokenizer_file.size(),
                            " bytes, at most 4096 are allowed"));
  }
  if (const int64_t total = c.TotalParams(); total > kMaxTotalParams) {
    return bad(absl::StrCat("config has ", total == std::numeric_limits<int64_t>::max() ? "more than 2^63" :
                            absl::StrCat(total), " parameters, above the limit of ", kMaxTotalParams,
                            " (check n_layers, n_experts, expert_hidden, d_model, vocab_size)"));
  }
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

namespace {

// YaRN: a nested "yarn" object (which also accepts HF's
// "original_max_position_embeddings"), or flat "yarn_*" keys, read after it.
absl::Status ParseYarn(const json& j, YarnConfig* yarn) {
  if (auto it = j.find("yarn"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field 'yarn' must be an object, found ", JsonExcerpt(*it)));
    }
    RETURN_IF_ERROR(ReadFields(*it, kYarnFields, "", "yarn.", yarn));
    RETURN_IF_ERROR(ReadField(*it, "original_max_position_embeddings", "yarn.original_max_position_embeddings",
                              &yarn->original_max_position));
  }
  return ReadFields(j, kYarnFields, "yarn_", "yarn_", yarn);
}

// "sink_clamp": [lo, hi].
absl::Status ParseSinkClamp(const json& j, ModelConfig* c) {
  auto it = j.find("sink_clamp");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number() || !(*it)[1].is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'sink_clamp' must be [lo, hi] numbers, found ", JsonExcerpt(*it)));
  }
  c->sink_clamp_lo = (*it)[0].get<double>();
  c->sink_clamp_hi = (*it)[1].get<double>();
  return absl::OkStatus();
}

// "tokenizer": {"type": "byte" | "char" | "bpe", "file": ...} or just the
// type as a string. A BPE tokenizer's file defaults to tokenizer.json.
absl::Status ParseTokenizer(const json& j, ModelConfig* c) {
  auto it = j.find("tokenizer");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  std::string type;
  if (it->is_string()) {
    type = it->get<std::string>();
  } else if (it->is_object()) {
    RETURN_IF_ERROR(ReadField(*it, "type", "tokenizer.type", &type));
    RETURN_IF_ERROR(ReadField(*it, "file", "tokenizer.file", &c->tokenizer_file));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'tokenizer' must be an object like {\"type\": \"bpe\"}, found ", JsonExcerpt(*it)));
  }
  if (type == "byte" || type.empty()) {
    c->tokenizer = TokenizerType::kByte;
  } else if (type == "char") {
    c->tokenizer = TokenizerType::kChar;
  } else if (type == "bpe") {
    c->tokenizer = TokenizerType::kBpe;
    if (c->tokenizer_file.empty()) c->tokenizer_file = "tokenizer.json";
  } else {
    return absl::InvalidArgumentError(absl::StrCat("config field 'tokenizer.type' must be byte, char or bpe, found '",
                                                   type.substr(0, 80), type.size() > 80 ? "...'" : "'"));
  }
  return absl::OkStatus();
}

// "eos_token_id": an integer, or null for none.
absl::Status ParseEosTokenId(const json& j, ModelConfig* c) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config field 'eos_token_id' must be an integer or null, found ", JsonExcerpt(*it)));
  }
  c->eos_token_id = it->get<int64_t>();
  return absl::OkStatus();
}

// "chat_template": {"roles": {ROLE: {"prefix": S, "suffix": S}, ...},
// "generation_prefix": S}; null or absent for none. At most kMaxChatRoles
// roles, each string at most kMaxChatTemplateString bytes.
constexpr size_t kMaxChatRoles = 16;
constexpr size_t kMaxChatTemplateString = 4096;

absl::Status ReadTemplateString(const json& obj, const std::string& key, const std::string& path, std::string* out) {
  RETURN_IF_ERROR(ReadField(obj, key, path, out));
  if (out->size() > kMaxChatTemplateString) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", path, "' is ", out->size(), " bytes, at most ",
                                                   kMaxChatTemplateString, " are allowed"));
  }
  return absl::OkStatus();
}

// "chat_format": "template" (default) or "harmony"; harmony needs a BPE
// tokenizer (its special tokens) and no chat_template.
absl::Status ParseChatFormat(const json& j, ModelConfig* c) {
  auto it = j.find("chat_format");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (*it == "template") return absl::OkStatus();
  if (*it != "harmony") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'chat_format' must be \"template\" or \"harmony\", found ", JsonExcerpt(*it)));
  }
  if (c->tokenizer != TokenizerType::kBpe) {
    return absl::InvalidArgumentError(
        "config field 'chat_format' \"harmony\" needs a BPE tokenizer with the harmony special tokens "
        "(tokenizer.type \"bpe\")");
  }
  if (c->chat_template) {
    return absl::InvalidArgumentError(
        "config fields 'chat_format' \"harmony\" and 'chat_template' exclude each other: harmony renders "
        "messages itself");
  }
  c->chat_format = ChatFormat::kHarmony;
  return absl::OkStatus();
}

absl::Status ParseChatTemplate(const json& j, ModelConfig* c) {
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  auto roles = it->is_object() ? it->find("roles") : it->end();
  if (!it->is_object() || roles == it->end() || !roles->is_object() || roles->empty() ||
      roles->size() > kMaxChatRoles) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config field 'chat_template' must be an object with 'roles' (1 to ", kMaxChatRoles,
        " roles, each {\"prefix\": ..., \"suffix\": ...}) and 'generation_prefix', found ", JsonExcerpt(*it)));
  }
  ChatTemplate t;
  RETURN_IF_ERROR(
      ReadTemplateString(*it, "generation_prefix", "chat_template.generation_prefix", &t.generation_prefix));
  for (const auto& [role, r] : roles->items()) {
    const std::string path = absl::StrCat("chat_template.roles.", role.substr(0, 64));
    if (!r.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config field '", path, "' must be {\"prefix\": ..., \"suffix\": ...}, found ", JsonExcerpt(r)));
    }
    ChatTemplate::Role& out = t.roles[role];
    RETURN_IF_ERROR(ReadTemplateString(r, "prefix", path + ".prefix", &out.prefix));
    RETURN_IF_ERROR(ReadTemplateString(r, "suffix", path + ".suffix", &out.suffix));
  }
  c->chat_template = std::move(t);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  RETURN_IF_ERROR(CheckJsonNesting(json_text, kMaxJsonDepth, "model config"));
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("model config is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("model config must be a JSON object");

  for (const char* key : {"family", "swiglu_limit", "expert_format", "stop_token_ids"}) {
    if (j.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config field '", key, "' belongs to gpt-oss, whose config is read from its Hugging Face config.json "
          "(model_type \"gpt_oss\"), not from a pdserve config"));
    }
  }
  ModelConfig c;
  RETURN_IF_ERROR(ReadFields(j, kModelFields, "", "", &c));
  RETURN_IF_ERROR(ParseYarn(j, &c.yarn));
  RETURN_IF_ERROR(ParseSinkClamp(j, &c));
  RETURN_IF_ERROR(ParseTokenizer(j, &c));
  RETURN_IF_ERROR(ParseEosTokenId(j, &c));
  RETURN_IF_ERROR(ParseChatTemplate(j, &c));
  RETURN_IF_ERROR(ParseChatFormat(j, &c));
  RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read model config '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto config = IsHfConfig(ss.str()) ? LoadHfGptOssConfig(ss.str(), std::filesystem::path(path).parent_path().string())
                                     : ParseModelConfig(ss.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace pdserve
