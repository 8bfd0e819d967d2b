#include "router/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using json = nlohmann::json;
using MaybeError = std::optional<OpenAiError>;

#define OAI_RETURN_IF_ERROR(expr)         \
  do {                                    \
    if (MaybeError e_ = (expr)) return e_; \
  } while (0)

OpenAiError Bad(std::string param, std::string message) {
  OpenAiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

// The field, or nullptr when absent or null.
const json* Find(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

MaybeError ReadBool(const json& j, const char* key, bool* out) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return Bad(key, absl::StrCat("'", key, "' must be a boolean"));
  *out = v->get<bool>();
  return std::nullopt;
}

MaybeError ReadNumber(const json& j, const char* key, double lo, double hi, double* out) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return Bad(key, absl::StrCat("'", key, "' must be a number"));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return Bad(key, absl::StrCat("'", key, "' must be in [", lo, ", ", hi, "], got ", d));
  }
  *out = d;
  return std::nullopt;
}

MaybeError ReadInt(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return Bad(key, absl::StrCat("'", key, "' must be an integer"));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Bad(key, absl::StrCat("'", key, "' must be in [", lo, ", ", hi, "]"));
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) return Bad(key, absl::StrCat("'", key, "' must be in [", lo, ", ", hi, "], got ", i));
  *out = i;
  return std::nullopt;
}

MaybeError ParseObject(const std::string& body, json* j) {
  *j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded()) return Bad("", "the request body is not valid JSON");
  if (!j->is_object()) return Bad("", "the request body must be a JSON object");
  return std::nullopt;
}

MaybeError CheckModel(const json& j, const ServedModel& model) {
  const json* v = Find(j, "model");
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return Bad("model", "'model' must be a string");
  if (v->get<std::string>() == model.id) return std::nullopt;
  OpenAiError e = Bad("model", absl::StrCat("The model '", v->get<std::string>().substr(0, 128),
                                            "' does not exist; this server serves '", model.id, "'"));
  e.http_status = 404;
  e.code = "model_not_found";
  return e;
}

MaybeError ParseStop(const json& j, pdserve::v1::SamplingParams* s) {
  const json* v = Find(j, "stop");
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) {
    if (v->get<std::string>().empty()) return Bad("stop", "'stop' must not be empty");
    s->add_stop(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return Bad("stop", "'stop' must be a string or an array of strings");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_string() || e.get<std::string>().empty()) {
      return Bad("stop", absl::StrCat("'stop[", i, "]' must be a non-empty string"));
    }
    s->add_stop(e.get<std::string>());
  }
  return std::nullopt;
}

// max_tokens (or max_completion_tokens), temperature, top_p, top_k, seed,
// stop, ignore_eos. Defaults as OpenAI: temperature 1, top_p 1.
MaybeError ParseSampling(const json& j, uint32_t default_max_tokens, const ServedModel& model,
                         pdserve::v1::SamplingParams* s, bool* seed_given) {
  const int64_t cap = std::min<int64_t>(std::max<int64_t>(model.max_context, 1), std::numeric_limits<uint32_t>::max());
  int64_t max_tokens = default_max_tokens;
  OAI_RETURN_IF_ERROR(ReadInt(j, "max_completion_tokens", 1, cap, &max_tokens));
  OAI_RETURN_IF_ERROR(ReadInt(j, "max_tokens", 1, cap, &max_tokens));
  s->set_max_new_tokens(static_cast<uint32_t>(max_tokens));
  double temperature = 1.0, top_p = 1.0;
  OAI_RETURN_IF_ERROR(ReadNumber(j, "temperature", 0.0, 2.0, &temperature));
  OAI_RETURN_IF_ERROR(ReadNumber(j, "top_p", 0.0, 1.0, &top_p));
  if (top_p == 0.0) {
    // Only the most likely token: greedy. The proto's top_p 0 would mean 1
    // (keep every token), so it is not passed on as 0.
    temperature = 0.0;
    top_p = 1.0;
  }
  s->set_temperature(static_cast<float>(temperature));
  s->set_top_p(static_cast<float>(top_p));
  int64_t top_k = 0;
  OAI_RETURN_IF_ERROR(ReadInt(j, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  s->set_top_k(top_k < 0 ? 0 : static_cast<uint32_t>(top_k));  // -1: no limit (vLLM's spelling)
  int64_t seed = 0;
  OAI_RETURN_IF_ERROR(ReadInt(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                              &seed));
  s->set_seed(static_cast<uint64_t>(seed));
  *seed_given = Find(j, "seed") != nullptr;
  bool ignore_eos = false;
  OAI_RETURN_IF_ERROR(ReadBool(j, "ignore_eos", &ignore_eos));
  s->set_ignore_eos(ignore_eos);
  return ParseStop(j, s);
}

MaybeError ParseStreaming(const json& j, OpenAiRequest* out) {
  OAI_RETURN_IF_ERROR(ReadBool(j, "stream", &out->stream));
  const json* opts = Find(j, "stream_options");
  if (opts == nullptr) return std::nullopt;
  if (!opts->is_object()) return Bad("stream_options", "'stream_options' must be an object");
  for (auto it = opts->begin(); it != opts->end(); ++it) {
    const std::string param = absl::StrCat("stream_options.", it.key().substr(0, 128));
    if (it.key() == "include_usage") continue;
    // pdserve never adds OpenAI's obfuscation padding: false only.
    if (it.key() == "include_obfuscation" && (it->is_null() || *it == false)) continue;
    if (it.key() == "include_obfuscation") {
      return Bad(param, absl::StrCat("'", param, "' must be false: pdserve does not pad chunks"));
    }
    return Bad(param, absl::StrCat("unknown field '", param, "': pdserve does not implement it"));
  }
  if (MaybeError e = ReadBool(*opts, "include_usage", &out->include_usage)) {
    e->param = "stream_options.include_usage";
    e->message = "'stream_options.include_usage' must be a boolean";
    return e;
  }
  return std::nullopt;
}

// Ids in one JSON array into token_ids; false when one is not a uint32.
bool ReadTokenIds(const json& a, pdserve::v1::GenerateRequest* g) {
  for (const json& e : a) {
    if (!e.is_number_unsigned() || e.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) return false;
    g->add_token_ids(static_cast<uint32_t>(e.get<uint64_t>()));
  }
  return true;
}

// "prompt": a string, an array of token ids, or an array of one string (or
// of one array of ids); more than one prompt is a batch, refused.
MaybeError ParsePrompt(const json& j, pdserve::v1::GenerateRequest* g) {
  const json* p = Find(j, "prompt");
  if (p == nullptr) return Bad("prompt", "'prompt' is required");
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    if (p->get<std::string>().empty()) return Bad("prompt", "'prompt' is empty");
    g->set_text(p->get<std::string>());
    return std::nullopt;
  }
  if (!p->is_array()) return Bad("prompt", "'prompt' must be a string or an array of token ids");
  if (p->empty()) return Bad("prompt", "'prompt' is empty");
  if ((*p)[0].is_string() || (*p)[0].is_array()) {
    return Bad("prompt", "several prompts in one request (batch) are not supported: send one prompt per request");
  }
  if (!ReadTokenIds(*p, g)) return Bad("prompt", "'prompt' token ids must be integers in [0, 2^32)");
  return std::nullopt;
}

// One message's text: a string, or text parts.
MaybeError MessageContent(const json& m, const std::string& where, std::string* text) {
  const json* c = Find(m, "content");
  if (c == nullptr) return Bad(where + ".content", absl::StrCat("'", where, ".content' is required"));
  if (c->is_string()) {
    *text = c->get<std::string>();
    return std::nullopt;
  }
  if (!c->is_array()) return Bad(where + ".content", absl::StrCat("'", where, ".content' must be a string or parts"));
  for (size_t i = 0; i < c->size(); ++i) {
    const json& part = (*c)[i];
    const json* type = part.is_object() ? Find(part, "type") : nullptr;
    const json* t = part.is_object() ? Find(part, "text") : nullptr;
    if (type == nullptr || *type != "text" || t == nullptr || !t->is_string()) {
      return Bad(absl::StrCat(where, ".content[", i, "]"),
                 absl::StrCat("'", where, ".content[", i, "]' must be {\"type\": \"text\", \"text\": ...}"));
    }
    *text += t->get<std::string>();
  }
  return std::nullopt;
}

// A message's keys besides role and content: null or empty, or one of
// `also` (which the caller reads).
MaybeError OnlyRoleAndContent(const json& m, const std::string& where, std::initializer_list<const char*> also = {}) {
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it.key() == "role" || it.key() == "content" || it->is_null() || (it->is_array() && it->empty())) continue;
    bool read = false;
    for (const char* key : also) read = read || it.key() == key;
    if (read) continue;
    const std::string param = absl::StrCat(where, ".", it.key().substr(0, 128));
    return Bad(param, absl::StrCat("'", param, "' is not supported: a message has a role and a content only"));
  }
  return std::nullopt;
}

MaybeError ReadReasoningEffort(const json* v, ReasoningEffort* effort) {
  if (v == nullptr || v->is_null()) return std::nullopt;
  for (ReasoningEffort e : {ReasoningEffort::kLow, ReasoningEffort::kMedium, ReasoningEffort::kHigh}) {
    if (*v == ReasoningEffortName(e)) {
      *effort = e;
      return std::nullopt;
    }
  }
  return Bad("reasoning_effort", absl::StrCat("'reasoning_effort' must be \"low\", \"medium\" or \"high\", got ",
                                              v->dump().substr(0, 64)));
}

// One message of a harmony chat into *out (HarmonyConversationFromMessages).
MaybeError HarmonyMessage(const json& m, size_t i, HarmonyConversation* out) {
  const std::string where = absl::StrCat("messages[", i, "]");
  const json* role = m.is_object() ? Find(m, "role") : nullptr;
  if (role == nullptr || !role->is_string()) {
    return Bad(where + ".role", absl::StrCat("'", where, "' must be an object with a string 'role'"));
  }
  const std::string r = role->get<std::string>().substr(0, 64);
  if (r == "tool" || r == "function") {
    return Bad(where + ".role", absl::StrCat("'", where, ".role' '", r, "': tool results are not supported, pdserve "
                                             "does not implement tool calls for harmony models"));
  }
  const bool instructions = r == "system" || r == "developer";
  if (!instructions && r != "user" && r != "assistant") {
    return Bad(where + ".role", absl::StrCat("'", where, ".role' '", r,
                                             "' is not a role of a harmony chat (system, developer, user, assistant)"));
  }
  if (instructions && i > 0) {
    return Bad(where + ".role", absl::StrCat("'", where, ".role' '", r, "' must be the first message: it becomes the "
                                             "harmony developer message's instructions"));
  }
  if (const json* calls = Find(m, "tool_calls"); calls != nullptr && !(calls->is_array() && calls->empty())) {
    return Bad(where + ".tool_calls", absl::StrCat("'", where, ".tool_calls' is not supported: pdserve does not "
                                                   "implement tool calls for harmony models"));
  }
  const bool assistant = r == "assistant";
  if (const json* cot = Find(m, "reasoning_content"); assistant && cot != nullptr && !cot->is_string()) {
    return Bad(where + ".reasoning_content", absl::StrCat("'", where, ".reasoning_content' must be a string"));
  }
  // An earlier turn's chain of thought is dropped (harmony's rule).
  OAI_RETURN_IF_ERROR(OnlyRoleAndContent(m, where, assistant ? std::initializer_list<const char*>{"reasoning_content"}
                                                              : std::initializer_list<const char*>{}));
  std::string content;
  OAI_RETURN_IF_ERROR(MessageContent(m, where, &content));
  if (instructions) {
    out->instructions = std::move(content);
  } else {
    out->turns.push_back({assistant ? HarmonyTurn::Role::kAssistant : HarmonyTurn::Role::kUser, std::move(content)});
  }
  return std::nullopt;
}

// The prompt of a template model: messages through its chat template.
MaybeError RenderTemplateChat(const json& j, const json& messages, const ServedModel& model,
                              pdserve::v1::GenerateRequest* g) {
  if (Find(j, "reasoning_effort") != nullptr) {
    return Bad("reasoning_effort", absl::StrCat("'reasoning_effort' applies to harmony models only (config.json "
                                                "\"chat_format\": \"harmony\"); model '", model.id,
                                                "' renders its chat template"));
  }
  std::string prompt;
  OAI_RETURN_IF_ERROR(RenderChatPrompt(messages, *model.chat_template, &prompt));
  g->set_text(std::move(prompt));
  return std::nullopt;
}

// The prompt of a harmony model: token ids (harmony_chat.h).
MaybeError RenderHarmonyChat(const json& j, const json& messages, const HarmonyChat& harmony,
                             pdserve::v1::GenerateRequest* g) {
  HarmonyConversation conversation;
  OAI_RETURN_IF_ERROR(
      HarmonyConversationFromMessages(messages, Find(j, "reasoning_effort"), harmony.Today(), &conversation));
  absl::StatusOr<std::vector<uint32_t>> ids = harmony.Render(conversation);
  if (!ids.ok()) return Bad("messages", absl::StrCat("the messages cannot be rendered: ", ids.status().message()));
  g->mutable_token_ids()->Assign(ids->begin(), ids->end());
  return std::nullopt;
}

json UsageJson(const pdserve::v1::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens()},
          {"completion_tokens", u.generated_tokens()},
          {"total_tokens", static_cast<uint64_t>(u.prompt_tokens()) + u.generated_tokens()}};
}

json FinishJson(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

json Envelope(const char* object, const CompletionPiece& p) {
  return {{"id", p.id}, {"object", object}, {"created", p.created}, {"model", p.model}};
}

}  // namespace

std::string ErrorBody(const OpenAiError& error) {
  json e = {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", error.code.empty() ? json(nullptr) : json(error.code)}};
  return json{{"error", std::move(e)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<OpenAiError> ParseCompletionRequest(const std::string& body, const ServedModel& model,
                                                  OpenAiRequest* out) {
  json j;
  OAI_RETURN_IF_ERROR(ParseObject(body, &j));
  out->endpoint = OpenAiEndpoint::kCompletions;
  OAI_RETURN_IF_ERROR(CheckModel(j, model));
  OAI_RETURN_IF_ERROR(CheckOpenAiFields(j, OpenAiEndpoint::kCompletions));
  OAI_RETURN_IF_ERROR(ParsePrompt(j, &out->generate));
  OAI_RETURN_IF_ERROR(ParseSampling(j, kDefaultCompletionMaxTokens, model, out->generate.mutable_sampling(),
                                    &out->seed_given));
  return ParseStreaming(j, out);
}

std::optional<OpenAiError> ParseChatRequest(const std::string& body, const ServedModel& model, OpenAiRequest* out) {
  json j;
  OAI_RETURN_IF_ERROR(ParseObject(body, &j));
  out->endpoint = OpenAiEndpoint::kChat;
  OAI_RETURN_IF_ERROR(CheckModel(j, model));
  if (model.chat_template == nullptr && model.harmony == nullptr) {
    return Bad("messages", !model.chat_refusal.empty()
                               ? model.chat_refusal
                               : absl::StrCat("model '", model.id,
                                              "' has no chat template (config.json 'chat_template'): use "
                                              "/v1/completions"));
  }
  OAI_RETURN_IF_ERROR(CheckOpenAiFields(j, OpenAiEndpoint::kChat));
  const json* messages = Find(j, "messages");
  if (messages == nullptr) return Bad("messages", "'messages' is required");
  OAI_RETURN_IF_ERROR(model.harmony != nullptr ? RenderHarmonyChat(j, *messages, *model.harmony, &out->generate)
                                               : RenderTemplateChat(j, *messages, model, &out->generate));
  OAI_RETURN_IF_ERROR(
      ParseSampling(j, kDefaultChatMaxTokens, model, out->generate.mutable_sampling(), &out->seed_given));
  if (model.harmony != nullptr && out->generate.sampling().stop_size() > 0) {
    // Stop strings would match the raw output, headers and reasoning
    // included; OpenAI's reasoning models refuse `stop` too.
    return Bad("stop", "'stop' is not supported for harmony models: the answer comes in channels (reasoning_content, "
                       "content), and generation ends at the model's <|return|>");
  }
  return ParseStreaming(j, out);
}

std::optional<OpenAiError> HarmonyConversationFromMessages(const nlohmann::json& messages,
                                                           const nlohmann::json* reasoning_effort, std::string date,
                                                           HarmonyConversation* out) {
  *out = HarmonyConversation();
  out->date = std::move(date);
  OAI_RETURN_IF_ERROR(ReadReasoningEffort(reasoning_effort, &out->effort));
  if (!messages.is_array() || messages.empty()) return Bad("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < messages.size(); ++i) OAI_RETURN_IF_ERROR(HarmonyMessage(messages[i], i, out));
  return std::nullopt;
}

std::optional<OpenAiError> RenderChatPrompt(const nlohmann::json& messages, const ChatTemplate& tmpl,
                                            std::string* prompt) {
  if (!messages.is_array() || messages.empty()) return Bad("messages", "'messages' must be a non-empty array");
  prompt->clear();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = absl::StrCat("messages[", i, "]");
    const json& m = messages[i];
    const json* role = m.is_object() ? Find(m, "role") : nullptr;
    if (role == nullptr || !role->is_string()) {
      return Bad(where + ".role", absl::StrCat("'", where, "' must be an object with a string 'role'"));
    }
    auto r = tmpl.roles.find(role->get<std::string>());
    if (r == tmpl.roles.end()) {
      std::string known;
      for (const auto& [name, unused] : tmpl.roles) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
      return Bad(where + ".role", absl::StrCat("'", where, ".role' '", role->get<std::string>().substr(0, 64),
                                               "' is not in this model's chat template (", known, ")"));
    }
    OAI_RETURN_IF_ERROR(OnlyRoleAndContent(m, where));
    std::string content;
    OAI_RETURN_IF_ERROR(MessageContent(m, where, &content));
    absl::StrAppend(prompt, r->second.prefix, content, r->second.suffix);
  }
  prompt->append(tmpl.generation_prefix);
  return std::nullopt;
}

std::string FinishReasonString(pdserve::v1::FinishReason reason) {
  switch (reason) {
    case pdserve::v1::FINISH_REASON_LENGTH: return "length";
    case pdserve::v1::FINISH_REASON_EOS:
    case pdserve::v1::FINISH_REASON_STOP: return "stop";
    default: return "";
  }
}

std::string CompletionBody(OpenAiEndpoint endpoint, const CompletionPiece& piece, const pdserve::v1::Usage& usage) {
  const bool chat = endpoint == OpenAiEndpoint::kChat;
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishJson(piece.finish_reason)}};
  if (chat && piece.channels) {
    choice["message"] = {{"role", "assistant"},
                         {"content", piece.text.empty() ? json(nullptr) : json(piece.text)},
                         {"reasoning_content", piece.reasoning.empty() ? json(nullptr) : json(piece.reasoning)}};
  } else if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", piece.text}};
  } else {
    choice["text"] = piece.text;
  }
  json j = Envelope(chat ? "chat.completion" : "text_completion", piece);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = UsageJson(usage);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ChunkBody(OpenAiEndpoint endpoint, const CompletionPiece& piece, bool first, bool usage_null) {
  const bool chat = endpoint == OpenAiEndpoint::kChat;
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishJson(piece.finish_reason)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!piece.text.empty() || first) delta["content"] = piece.text;
    if (piece.channels && !piece.reasoning.empty()) delta["reasoning_content"] = piece.reasoning;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = piece.text;
  }
  json j = Envelope(chat ? "chat.completion.chunk" : "text_completion", piece);
  j["choices"] = json::array({std::move(choice)});
  if (usage_null) j["usage"] = nullptr;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string UsageChunkBody(OpenAiEndpoint endpoint, const CompletionPiece& piece, const pdserve::v1::Usage& usage) {
  json j = Envelope(endpoint == OpenAiEndpoint::kChat ? "chat.completion.chunk" : "text_completion", piece);
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ModelsBody(const ServedModel& model) {
  json m = {{"id", model.id},
            {"object", "model"},
            {"created", model.created},
            {"owned_by", "pdserve"},
            {"max_model_len", model.max_context}};
  return json{{"object", "list"}, {"data", json::array({std::move(m)})}}.dump(-1, ' ', false,
                                                                              json::error_handler_t::replace);
}

}  // namespace pdserve
