// The OpenAI Completions and Chat wire format, mapped to and from
// pdserve.v1 messages. Pure functions: no I/O, no gRPC calls.
//
//   ServedModel                    what the HTTP layer says about the model
//   ParseCompletionRequest         POST /v1/completions body -> OpenAiRequest
//   ParseChatRequest               POST /v1/chat/completions body -> OpenAiRequest
//   RenderChatPrompt               messages + the model's chat template -> text
//   HarmonyConversationFromMessages  messages of a harmony model -> what
//                                  HarmonyChat renders (harmony_chat.h)
//   CompletionBody / ChunkBody / UsageChunkBody   responses and SSE chunks
//   ModelsBody                     GET /v1/models
//   OpenAiError, ErrorBody         {"error": {message, type, param, code}}
//   ErrorFromGrpc                  a router status -> HTTP status + error
//                                  (router/openai_status.h: the one table)
//
// Every refusal of a request is an OpenAiError whose `param` names the
// field (400), or model_not_found (404) for a `model` that is not served.
// Which fields exist and what pdserve does with each is one table,
// router/openai_fields.h, walked before anything else is parsed: a field
// pdserve does not implement is refused unless absent, null or at its
// default (n 1, echo false, ...), and an unknown field is refused (400
// naming it), never ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/model/config.h"
#include "grpcpp/support/status.h"
#include "nlohmann/json_fwd.hpp"
#include "pdserve/v1/generate.pb.h"
#include "router/harmony_chat.h"
#include "router/openai_fields.h"
#include "router/openai_status.h"

namespace pdserve {

struct ServedModel {
  std::string id;                             // the OpenAI `model` (the config's name)
  int64_t max_context = 0;                    // prompt + completion tokens
  const ChatTemplate* chat_template = nullptr;  // nullptr: chat is refused (but for harmony)
  int64_t created = 0;                        // unix seconds, for /v1/models
  // A harmony model (config chat_format "harmony"): chat is rendered into
  // token ids by it and its answer parsed into channels (docs/http.md,
  // "Harmony models"). nullptr for a template model.
  const HarmonyChat* harmony = nullptr;
  // Why chat is refused when a harmony model has no HarmonyChat (its
  // tokenizer is missing); empty otherwise.
  std::string chat_refusal{};
};

// Tokens generated when a request gives no max_tokens: OpenAI's 16 for
// completions; for chat (OpenAI: up to the context) a bounded 256.
inline constexpr uint32_t kDefaultCompletionMaxTokens = 16;
inline constexpr uint32_t kDefaultChatMaxTokens = 256;

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  pdserve::v1::GenerateRequest generate;  // request_id left empty
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // `seed` was given. Without one OpenAI samples differently each time: the
  // HTTP layer then draws a random seed (the gRPC default is 0).
  bool seed_given = false;
};

// The error JSON: {"error": {"message", "type", "param", "code"}} (param
// and code null when empty).
std::string ErrorBody(const OpenAiError& error);

// Parse a request body. nullopt and *out filled on success. `top_p: 0`
// keeps only the most likely token: it is sent as greedy (temperature 0,
// top_p 1), since the proto's top_p 0 means 1 (no truncation).
std::optional<OpenAiError> ParseCompletionRequest(const std::string& body, const ServedModel& model,
                                                  OpenAiRequest* out);
std::optional<OpenAiError> ParseChatRequest(const std::string& body, const ServedModel& model, OpenAiRequest* out);

// The chat prompt for `messages` (the request's array): each message's
// role prefix, content (a string, or an array of {"type": "text", "text"}
// parts) and role suffix, then the generation prefix. A message key other
// than role and content (name, tool_calls, ...) is refused unless null or
// empty.
std::optional<OpenAiError> RenderChatPrompt(const nlohmann::json& messages, const ChatTemplate& tmpl,
                                            std::string* prompt);

// A harmony model's `messages` (the request's array) and reasoning_effort
// (the request's field, or nullptr) as a conversation, `date` its current
// date. A first message of role system or developer becomes the
// instructions (the developer message); user and assistant messages are
// turns (an assistant's `reasoning_content` is accepted and dropped, as
// harmony drops earlier turns' chain of thought). Tool calls, tool
// messages, a system or developer message after the first and any other
// key that is not null or empty are refused, naming messages[i].KEY.
std::optional<OpenAiError> HarmonyConversationFromMessages(const nlohmann::json& messages,
                                                           const nlohmann::json* reasoning_effort, std::string date,
                                                           HarmonyConversation* out);

// "stop" (EOS or a stop sequence) or "length"; empty while unfinished.
std::string FinishReasonString(pdserve::v1::FinishReason reason);

// What one response carries, whole or in part.
struct CompletionPiece {
  std::string id;       // cmpl-... / chatcmpl-...
  int64_t created = 0;  // unix seconds
  std::string model;
  std::string text;
  std::string finish_reason;  // empty: null
  // A harmony model's answer (harmony_parser.h): `text` is the content and
  // `reasoning` the analysis channel's text, vLLM's reasoning_content. A
  // whole response's message then carries both (each null when empty), a
  // chunk's delta each that is not empty (content "" on the first).
  bool channels = false;
  std::string reasoning{};
};

// A whole (non-streamed) response, with usage.
std::string CompletionBody(OpenAiEndpoint endpoint, const CompletionPiece& piece, const pdserve::v1::Usage& usage);
// One SSE chunk's JSON (no "data: " framing). For chat, `first` adds the
// assistant role to the delta. `usage_null` writes "usage": null (OpenAI
// does this on every chunk when include_usage is on).
std::string ChunkBody(OpenAiEndpoint endpoint, const CompletionPiece& piece, bool first, bool usage_null);
// The include_usage chunk: empty choices and the usage.
std::string UsageChunkBody(OpenAiEndpoint endpoint, const CompletionPiece& piece, const pdserve::v1::Usage& usage);

// GET /v1/models.
std::string ModelsBody(const ServedModel& model);

}  // namespace pdserve
