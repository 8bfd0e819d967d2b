// The OpenAI Completions and Chat wire format, mapped to and from
// pdserve.v1 messages. Pure functions: no I/O, no gRPC calls.
//
//   ServedModel                    what the HTTP layer says about the model
//   ParseCompletionRequest         POST /v1/completions body -> OpenAiRequest
//   ParseChatRequest               POST /v1/chat/completions body -> OpenAiRequest
//   RenderChatPrompt               messages + the model's chat template -> text
//   CompletionBody / ChunkBody / UsageChunkBody   responses and SSE chunks
//   ModelsBody                     GET /v1/models
//   OpenAiError, ErrorBody         {"error": {message, type, param, code}}
//   ErrorFromGrpc                  a router status -> HTTP status + error
//
// Every refusal of a request is an OpenAiError whose `param` names the
// field (400), or model_not_found (404) for a `model` that is not served.
// Fields OpenAI defines that pdserve does not implement are refused when
// set to anything but their neutral value (n != 1, echo, best_of,
// logprobs, penalties, logit_bias, suffix, tools); unknown fields are
// ignored, as OpenAI clients send extras.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/model/config.h"
#include "grpcpp/support/status.h"
#include "nlohmann/json_fwd.hpp"
#include "pdserve/v1/generate.pb.h"

namespace pdserve {

enum class OpenAiEndpoint { kCompletions, kChat };

struct ServedModel {
  std::string id;                             // the OpenAI `model` (the config's name)
  int64_t max_context = 0;                    // prompt + completion tokens
  const ChatTemplate* chat_template = nullptr;  // nullptr: chat is refused
  int64_t created = 0;                        // unix seconds, for /v1/models
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

struct OpenAiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field; empty when none
  std::string code;   // e.g. model_not_found, invalid_api_key; empty when none
};

// The error JSON: {"error": {"message", "type", "param", "code"}} (param
// and code null when empty).
std::string ErrorBody(const OpenAiError& error);

// Parse a request body. nullopt and *out filled on success.
std::optional<OpenAiError> ParseCompletionRequest(const std::string& body, const ServedModel& model,
                                                  OpenAiRequest* out);
std::optional<OpenAiError> ParseChatRequest(const std::string& body, const ServedModel& model, OpenAiRequest* out);

// The chat prompt for `messages` (the request's array): each message's
// role prefix, content (a string, or an array of {"type": "text", "text"}
// parts) and role suffix, then the generation prefix.
std::optional<OpenAiError> RenderChatPrompt(const nlohmann::json& messages, const ChatTemplate& tmpl,
                                            std::string* prompt);

// "stop" (EOS or a stop sequence) or "length"; empty while unfinished.
std::string FinishReasonString(pdserve::v1::FinishReason reason);

// What one response carries, whole or in part.
struct CompletionPiece {
  std::string id;       // cmpl-... / chatcmpl-...
  int64_t created = 0;  // unix seconds
  std::string model;
  std::string text;
  std::string finish_reason;  // empty: null
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

// A failed router call as an OpenAI error: INVALID_ARGUMENT 400 (the field
// guessed from the message, gRPC names translated: max_new_tokens ->
// max_tokens, text/token_ids -> prompt or messages), UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, RESOURCE_EXHAUSTED 429,
// UNAVAILABLE 503, DEADLINE_EXCEEDED 504, CANCELLED 499, the rest 500.
OpenAiError ErrorFromGrpc(const grpc::Status& status, OpenAiEndpoint endpoint);

}  // namespace pdserve
