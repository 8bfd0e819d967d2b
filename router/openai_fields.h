// Every request field of POST /v1/completions and POST
// /v1/chat/completions, and what pdserve does with it: ONE table
// (openai_fields.cc) that the parser walks, the tests walk
// (tests/openai_protocol_test.cc) and docs/http.md mirrors ("Request
// fields"; a test checks each row). A field that is not in the table, or
// not a field of the endpoint, is refused with a 400 naming it: pdserve
// says no instead of ignoring what it does not do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json_fwd.hpp"
#include "router/openai_status.h"

namespace pdserve {

enum class FieldState : uint8_t {
  kImplemented,  // read and honoured (router/openai_protocol.cc)
  kNoEffect,     // accepted when of its type (`allowed`), has no effect: metadata
  kOnlyDefault,  // refused (400) unless absent, null or one of `allowed`
  kRefused,      // refused (400) unless absent or null
  kHarmonyOnly,  // read for harmony models (router/harmony_chat.h); refused (400) unless
                 // absent or null for a model with a chat template
};

inline constexpr uint8_t kCompletionsField = 1;
inline constexpr uint8_t kChatField = 2;
inline constexpr uint8_t kBothEndpoints = kCompletionsField | kChatField;

struct OpenAiField {
  const char* name;
  uint8_t endpoints;  // kCompletionsField, kChatField or both
  FieldState state;
  // kOnlyDefault: the accepted values as a JSON array ("[1]", "[{}]");
  // kNoEffect: the JSON type ("string", "object", "boolean"); else "".
  const char* allowed;
  // A value other than the default, as JSON: what the table's test sends
  // (an implemented field must accept it, any other must refuse it).
  const char* example;
  bool extension;  // pdserve's (or vLLM's), not in OpenAI's API
};

// The table, in the order of docs/http.md.
absl::Span<const OpenAiField> OpenAiFields();
// The row named `name`, or nullptr.
const OpenAiField* FindOpenAiField(absl::string_view name);
bool IsFieldOf(const OpenAiField& field, OpenAiEndpoint endpoint);

// The docs cell of `field` for `endpoint`: "yes", "accepted, no effect",
// "only `1`" (the allowed values, null aside), "refused", "harmony
// models", or "—" when it is not a field of the endpoint.
std::string FieldStateText(const OpenAiField& field, OpenAiEndpoint endpoint);

// Walks the body's keys against the table: the first key that is unknown,
// not a field of `endpoint`, refused, not its default or (no-effect fields)
// not of its type is a 400 naming it. Implemented (and harmony-only) fields are
// left to the parser. `body` is a JSON object.
std::optional<OpenAiError> CheckOpenAiFields(const nlohmann::json& body, OpenAiEndpoint endpoint);

}  // namespace pdserve
