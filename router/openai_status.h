// A failed router call as an OpenAI error: one table from the 17 gRPC codes
// to the HTTP status, `type` and `code` (docs/http.md, "Errors"), and the
// refused field carried as data.
//
// The router's refusals name their field as data: request_validation.cc
// puts the proto path ("sampling.max_new_tokens", "token_ids[2]") in an
// absl::Status payload and the router's Generate sends it as the trailing
// metadata `pdserve-param` (kFieldTrailerKey). The HTTP front reads it with
// ParamFromTrailers after the call finished and passes it to
// ErrorFromGrpc, which translates it to the OpenAI field (max_tokens,
// prompt / messages, top_p, ...). Nothing is guessed from the message.
// Likewise the trailer `pdserve-reason` (kReasonTrailerKey, retry_policy.h;
// ReasonFromTrailers) refines a code: RESOURCE_EXHAUSTED with
// kv_budget_exceeded (no decode worker's whole KV budget can ever hold the
// request) is 400 context_length_exceeded, not a 429 rate limit: retrying
// cannot help.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace pdserve {

enum class OpenAiEndpoint { kCompletions, kChat };

struct OpenAiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field; empty when none
  std::string code;   // e.g. model_not_found, invalid_api_key; empty when none
};

// One row of the mapping, for each gRPC code 0..16.
struct GrpcHttpMapping {
  grpc::StatusCode grpc_code;
  int http_status;
  const char* type;
  const char* code;  // "" for none (JSON null)
};

// The row for `code` (codes outside 0..16 get UNKNOWN's: 500). CANCELLED's
// row is the server's cancel (503); a client that went away is
// ErrorFromGrpc's client_gone.
const GrpcHttpMapping& GrpcToHttp(grpc::StatusCode code);

// HTTP status of a CANCELLED call whose client went away (nginx's 499).
// Nothing is sent to that client: the HTTP layer only logs it.
inline constexpr int kClientClosedRequest = 499;

// The router's field (a proto path, as in the pdserve-param trailer) as the
// OpenAI `param`: sampling.max_new_tokens -> max_tokens, sampling.top_p ->
// top_p, sampling.stop[1] -> stop, text / token_ids[3] -> prompt (chat:
// messages); another path is passed on as it is; "" stays "".
std::string OpenAiParam(absl::string_view router_field, OpenAiEndpoint endpoint);

// The trailing metadata `pdserve-param` of a finished call, or "".
std::string ParamFromTrailers(const grpc::ClientContext& context);
// The trailing metadata `pdserve-reason` of a finished call, or "".
std::string ReasonFromTrailers(const grpc::ClientContext& context);

// A failed router call: the status's row of GrpcToHttp, the message with
// gRPC field names translated (max_new_tokens -> max_tokens), `param` from
// the router's field (OpenAiParam of param_from_trailers). With
// `client_gone` (the HTTP client disconnected, so the HTTP layer cancelled
// the call) a CANCELLED status is 499 `client_closed_request`, only to log.
// `reason_from_trailers` (ReasonFromTrailers) kv_budget_exceeded makes a
// RESOURCE_EXHAUSTED the OUT_OF_RANGE row: 400 context_length_exceeded.
OpenAiError ErrorFromGrpc(const grpc::Status& status, OpenAiEndpoint endpoint, absl::string_view param_from_trailers,
                          bool client_gone = false, absl::string_view reason_from_trailers = "");
// The same without a field (param empty unless none was known anyway).
OpenAiError ErrorFromGrpc(const grpc::Status& status, OpenAiEndpoint endpoint);

}  // namespace pdserve
