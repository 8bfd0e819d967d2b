// libFuzzer target: the OpenAI request body parser (router/openai_protocol.h,
// the field table router/openai_fields.h), as the HTTP front hands it a body.
//
// The first byte picks the endpoint (bit 0: chat) and whether the model has
// a chat template (bit 1: none); the rest is the body. Properties: a
// refusal is a 400 (or a 404 naming `model`) whose `param` names a field
// whenever the body is a JSON object (a key "" aside), with a bounded
// message, and renders as OpenAI's error JSON; an accepted request uses
// only fields of its endpoint's table, none refused or off its default, and
// has exactly one non-empty prompt form, 1 <= max_new_tokens <=
// max_context, temperature in [0, 2], top_p in (0, 1] (top_p 0 arrives as
// greedy: temperature 0, top_p 1), and non-empty stops.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nlohmann/json.hpp"
#include "router/openai_fields.h"
#include "router/openai_protocol.h"

namespace {

using json = nlohmann::json;

void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "openai_request_fuzzer: %s: %.300s\n", what, detail.c_str());
  std::abort();
}

const pdserve::ChatTemplate& Template() {
  static const pdserve::ChatTemplate tmpl = [] {
    pdserve::ChatTemplate t;
    t.roles["system"] = {"<s>", "</s>\n"};
    t.roles["user"] = {"U: ", "\n"};
    t.roles["assistant"] = {"A: ", "\n"};
    t.generation_prefix = "A: ";
    return t;
  }();
  return tmpl;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const pdserve::OpenAiEndpoint endpoint = chat ? pdserve::OpenAiEndpoint::kChat
                                                : pdserve::OpenAiEndpoint::kCompletions;
  pdserve::ServedModel model{"tiny", 4096, (data[0] & 2) ? nullptr : &Template(), 1700000000};
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  pdserve::OpenAiRequest out;
  const std::optional<pdserve::OpenAiError> e =
      chat ? pdserve::ParseChatRequest(body, model, &out) : pdserve::ParseCompletionRequest(body, model, &out);
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (e) {
    if (e->http_status != 400 && !(e->http_status == 404 && e->param == "model")) {
      Fail("unexpected HTTP status", std::to_string(e->http_status) + " " + e->message);
    }
    // (A key "" is refused naming "", which renders as a null param.)
    if (j.is_object() && e->param.empty() && !j.contains("")) Fail("a refusal without a param", e->message);
    if (e->message.empty() || e->message.size() > 1000) Fail("empty or unbounded message", e->message);
    if (e->param.size() > 300) Fail("unbounded param", e->param);
    const json rendered = json::parse(pdserve::ErrorBody(*e), nullptr, false);
    if (!rendered.is_object() || !rendered.contains("error") || !rendered["error"]["message"].is_string()) {
      Fail("error body is not OpenAI's shape", pdserve::ErrorBody(*e));
    }
    return 0;
  }
  if (!j.is_object()) Fail("accepted a body that is not a JSON object", body);
  if (out.endpoint != endpoint) Fail("wrong endpoint", body);
  if (chat && model.chat_template == nullptr) Fail("chat accepted without a template", body);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const pdserve::OpenAiField* f = pdserve::FindOpenAiField(it.key());
    if (f == nullptr) Fail("accepted an unknown field", it.key());
    if (!pdserve::IsFieldOf(*f, endpoint)) Fail("accepted a field of the other endpoint", it.key());
    if (f->state == pdserve::FieldState::kRefused && !it->is_null()) Fail("accepted a refused field", it.key());
    if (f->state == pdserve::FieldState::kHarmonyOnly && !it->is_null() && model.harmony == nullptr) {
      Fail("accepted a harmony-only field for a template model", it.key());
    }
    if (f->state == pdserve::FieldState::kOnlyDefault && !it->is_null()) {
      bool ok = false;
      for (const json& a : json::parse(f->allowed)) ok = ok || *it == a;
      if (!ok) Fail("accepted a field off its default", it.key() + " = " + it->dump());
    }
  }
  const auto& g = out.generate;
  if (g.text().empty() == (g.token_ids_size() == 0)) Fail("not exactly one prompt form", body);
  const auto& s = g.sampling();
  if (s.max_new_tokens() < 1 || s.max_new_tokens() > model.max_context) Fail("max_new_tokens out of range", body);
  if (!(s.temperature() >= 0 && s.temperature() <= 2)) Fail("temperature out of range", body);
  if (!(s.top_p() > 0 && s.top_p() <= 1)) Fail("top_p out of (0, 1]", body);
  for (const std::string& stop : s.stop()) {
    if (stop.empty()) Fail("accepted an empty stop", body);
  }
  return 0;
}
