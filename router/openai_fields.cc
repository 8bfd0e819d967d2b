#include "router/openai_fields.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using json = nlohmann::json;
using S = FieldState;
constexpr uint8_t kC = kCompletionsField;
constexpr uint8_t kCh = kChatField;
constexpr uint8_t kB = kBothEndpoints;

// OpenAI's request fields of both endpoints (as of 2025), then pdserve's
// extensions. Keep docs/http.md's "Request fields" table in step (a test
// checks it).
constexpr OpenAiField kFields[] = {
    // name, endpoints, state, allowed, example (not the default), extension
    {"model", kB, S::kImplemented, "", R"("tiny")", false},
    {"prompt", kC, S::kImplemented, "", R"("x")", false},
    {"messages", kCh, S::kImplemented, "", R"([{"role": "user", "content": "x"}])", false},
    {"max_tokens", kB, S::kImplemented, "", "5", false},
    {"max_completion_tokens", kCh, S::kImplemented, "", "5", false},
    {"temperature", kB, S::kImplemented, "", "0.5", false},
    {"top_p", kB, S::kImplemented, "", "0.5", false},
    {"seed", kB, S::kImplemented, "", "7", false},
    {"stop", kB, S::kImplemented, "", R"("x")", false},
    {"stream", kB, S::kImplemented, "", "true", false},
    {"stream_options", kB, S::kImplemented, "", R"({"include_usage": true})", false},
    {"user", kB, S::kNoEffect, "string", R"("user-1")", false},
    {"safety_identifier", kCh, S::kNoEffect, "string", R"("user-1")", false},
    {"prompt_cache_key", kCh, S::kNoEffect, "string", R"("key")", false},
    {"metadata", kCh, S::kNoEffect, "object", R"({"k": "v"})", false},
    {"parallel_tool_calls", kCh, S::kNoEffect, "boolean", "false", false},
    {"n", kB, S::kOnlyDefault, "[1]", "2", false},
    {"best_of", kC, S::kOnlyDefault, "[1]", "2", false},
    {"echo", kC, S::kOnlyDefault, "[false]", "true", false},
    {"suffix", kC, S::kOnlyDefault, R"([""])", R"("end")", false},
    {"presence_penalty", kB, S::kOnlyDefault, "[0]", "0.5", false},
    {"frequency_penalty", kB, S::kOnlyDefault, "[0]", "0.5", false},
    {"logit_bias", kB, S::kOnlyDefault, "[{}]", R"({"1": 5})", false},
    {"logprobs", kB, S::kOnlyDefault, "[false]", "true", false},
    {"top_logprobs", kCh, S::kOnlyDefault, "[0]", "2", false},
    {"response_format", kCh, S::kOnlyDefault, R"([{"type": "text"}])", R"({"type": "json_object"})", false},
    {"tools", kCh, S::kOnlyDefault, "[[]]", R"([{"type": "function", "function": {"name": "f"}}])", false},
    {"tool_choice", kCh, S::kOnlyDefault, R"(["none"])", R"("auto")", false},
    {"functions", kCh, S::kOnlyDefault, "[[]]", R"([{"name": "f"}])", false},
    {"function_call", kCh, S::kOnlyDefault, R"(["none"])", R"("auto")", false},
    {"modalities", kCh, S::kOnlyDefault, R"([["text"]])", R"(["text", "audio"])", false},
    {"store", kCh, S::kOnlyDefault, "[false]", "true", false},
    {"service_tier", kCh, S::kOnlyDefault, R"(["auto", "default"])", R"("flex")", false},
    {"verbosity", kCh, S::kOnlyDefault, R"(["medium"])", R"("low")", false},
    {"audio", kCh, S::kRefused, "", R"({"voice": "alloy", "format": "wav"})", false},
    {"prediction", kCh, S::kRefused, "", R"({"type": "content", "content": "x"})", false},
    {"reasoning_effort", kCh, S::kHarmonyOnly, "", R"("low")", false},
    {"web_search_options", kCh, S::kRefused, "", "{}", false},
    {"top_k", kB, S::kImplemented, "", "40", true},
    {"ignore_eos", kB, S::kImplemented, "", "true", true},
};
constexpr size_t kNumFields = sizeof(kFields) / sizeof(kFields[0]);

// kOnlyDefault's accepted values, parsed once.
const std::vector<json>& Allowed(const OpenAiField& f) {
  static const std::vector<std::vector<json>> parsed = [] {
    std::vector<std::vector<json>> all(kNumFields);
    for (size_t i = 0; i < kNumFields; ++i) {
      if (kFields[i].state == S::kOnlyDefault) all[i] = json::parse(kFields[i].allowed).get<std::vector<json>>();
    }
    return all;
  }();
  return parsed[&f - kFields];
}

std::string AllowedText(const OpenAiField& f, const char* quote) {
  std::string text;
  for (const json& v : Allowed(f)) absl::StrAppend(&text, text.empty() ? "" : " or ", quote, v.dump(), quote);
  return text;
}

OpenAiError Bad(std::string param, std::string message) {
  OpenAiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

const char* Path(OpenAiEndpoint endpoint) {
  return endpoint == OpenAiEndpoint::kChat ? "POST /v1/chat/completions" : "POST /v1/completions";
}

}  // namespace

absl::Span<const OpenAiField> OpenAiFields() { return absl::MakeConstSpan(kFields); }

const OpenAiField* FindOpenAiField(absl::string_view name) {
  for (const OpenAiField& f : kFields) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

bool IsFieldOf(const OpenAiField& field, OpenAiEndpoint endpoint) {
  return (field.endpoints & (endpoint == OpenAiEndpoint::kChat ? kChatField : kCompletionsField)) != 0;
}

std::string FieldStateText(const OpenAiField& field, OpenAiEndpoint endpoint) {
  if (!IsFieldOf(field, endpoint)) return "—";
  switch (field.state) {
    case S::kImplemented: return "yes";
    case S::kNoEffect: return "accepted, no effect";
    case S::kOnlyDefault: return absl::StrCat("only ", AllowedText(field, "`"));
    case S::kRefused: return "refused";
    case S::kHarmonyOnly: return "harmony models";
  }
  return "";
}

std::optional<OpenAiError> CheckOpenAiFields(const nlohmann::json& body, OpenAiEndpoint endpoint) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    const json& value = it.value();
    const OpenAiField* f = FindOpenAiField(key);
    if (f == nullptr) {
      return Bad(key.substr(0, 128), absl::StrCat("unknown field '", key.substr(0, 128),
                                                  "': pdserve does not implement it (docs/http.md lists the fields)"));
    }
    if (!IsFieldOf(*f, endpoint)) {
      return Bad(key, absl::StrCat("'", key, "' is not a field of ", Path(endpoint)));
    }
    switch (f->state) {
      case S::kImplemented:
      case S::kHarmonyOnly: break;
      case S::kNoEffect:
        if (!value.is_null() && value.type_name() != absl::string_view(f->allowed)) {
          return Bad(key, absl::StrCat("'", key, "' must be a", *f->allowed == 'o' ? "n " : " ", f->allowed));
        }
        break;
      case S::kOnlyDefault: {
        if (value.is_null()) break;
        bool ok = false;
        for (const json& a : Allowed(*f)) ok = ok || value == a;
        if (!ok) {
          return Bad(key, absl::StrCat("'", key, "' must be ", AllowedText(*f, ""),
                                       ": pdserve does not implement other values"));
        }
        break;
      }
      case S::kRefused:
        if (!value.is_null()) return Bad(key, absl::StrCat("'", key, "' is not supported by pdserve"));
        break;
    }
  }
  return std::nullopt;
}

}  // namespace pdserve
