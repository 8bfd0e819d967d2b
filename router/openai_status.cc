#include "router/openai_status.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "common/net/sampling_validation.h"
#include "router/retry_policy.h"

namespace pdserve {
namespace {

using C = grpc::StatusCode;

// Indexed by the code's number: the test walks all 17.
constexpr GrpcHttpMapping kMapping[] = {
    {C::OK, 500, "server_error", "internal_error"},  // a call that ended without an answer
    {C::CANCELLED, 503, "service_unavailable", "cancelled"},  // cancelled by the server (e.g. shutting down)
    {C::UNKNOWN, 500, "server_error", "internal_error"},
    {C::INVALID_ARGUMENT, 400, "invalid_request_error", ""},
    {C::DEADLINE_EXCEEDED, 504, "timeout", "deadline_exceeded"},
    {C::NOT_FOUND, 404, "invalid_request_error", "not_found"},
    {C::ALREADY_EXISTS, 500, "server_error", "internal_error"},
    {C::PERMISSION_DENIED, 403, "permission_error", "permission_denied"},
    {C::RESOURCE_EXHAUSTED, 429, "rate_limit_error", "rate_limit_exceeded"},
    {C::FAILED_PRECONDITION, 500, "server_error", "internal_error"},
    {C::ABORTED, 500, "server_error", "internal_error"},
    // The request needs more tokens of KV than a decode worker has in all:
    // the message carries the numbers.
    {C::OUT_OF_RANGE, 400, "invalid_request_error", "context_length_exceeded"},
    {C::UNIMPLEMENTED, 501, "not_implemented_error", "not_implemented"},
    {C::INTERNAL, 500, "server_error", "internal_error"},
    {C::UNAVAILABLE, 503, "service_unavailable", "unavailable"},
    {C::DATA_LOSS, 500, "server_error", "internal_error"},
    {C::UNAUTHENTICATED, 401, "authentication_error", "invalid_api_key"},
};
static_assert(sizeof(kMapping) / sizeof(kMapping[0]) == 17, "one row per gRPC code");

constexpr bool RowsInCodeOrder() {
  for (int i = 0; i < 17; ++i) {
    if (static_cast<int>(kMapping[i].grpc_code) != i) return false;
  }
  return true;
}
static_assert(RowsInCodeOrder(), "kMapping[i] is code i");

// The router's proto paths and their OpenAI names ("" = the prompt field:
// prompt, or messages for chat). A path matches its own row and its
// elements ("sampling.stop[1]").
constexpr std::pair<const char*, const char*> kRouterFields[] = {
    {"sampling.max_new_tokens", "max_tokens"},
    {"sampling.temperature", "temperature"},
    {"sampling.top_p", "top_p"},
    {"sampling.top_k", "top_k"},
    {"sampling.seed", "seed"},
    {"sampling.stop", "stop"},
    {"sampling.ignore_eos", "ignore_eos"},
    {"text", ""},
    {"token_ids", ""},
};

}  // namespace

const GrpcHttpMapping& GrpcToHttp(grpc::StatusCode code) {
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kMapping[i] : kMapping[static_cast<int>(C::UNKNOWN)];
}

std::string OpenAiParam(absl::string_view router_field, OpenAiEndpoint endpoint) {
  for (const auto& [path, param] : kRouterFields) {
    if (router_field == path || (absl::StartsWith(router_field, path) && router_field[strlen(path)] == '[')) {
      if (*param != '\0') return param;
      return endpoint == OpenAiEndpoint::kChat ? "messages" : "prompt";
    }
  }
  return std::string(router_field);
}

namespace {

std::string Trailer(const grpc::ClientContext& context, const char* key) {
  const auto& md = context.GetServerTrailingMetadata();
  const auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

}  // namespace

std::string ParamFromTrailers(const grpc::ClientContext& context) { return Trailer(context, kFieldTrailerKey); }

std::string ReasonFromTrailers(const grpc::ClientContext& context) { return Trailer(context, kReasonTrailerKey); }

OpenAiError ErrorFromGrpc(const grpc::Status& status, OpenAiEndpoint endpoint, absl::string_view param_from_trailers,
                          bool client_gone, absl::string_view reason_from_trailers) {
  // A request no decode worker can ever hold is the client's to shorten,
  // not a rate limit to retry later.
  const bool never_fits =
      status.error_code() == C::RESOURCE_EXHAUSTED && reason_from_trailers == kReasonKvBudgetExceeded;
  const GrpcHttpMapping& row = GrpcToHttp(never_fits ? C::OUT_OF_RANGE : status.error_code());
  OpenAiError e;
  e.http_status = row.http_status;
  e.type = row.type;
  e.code = row.code;
  e.message = absl::StrReplaceAll(status.error_message(),
                                  {{"sampling.max_new_tokens", "max_tokens"}, {"max_new_tokens", "max_tokens"}});
  if (e.message.empty()) e.message = status.ok() ? "the router ended the call without an answer" : "request failed";
  e.param = OpenAiParam(param_from_trailers, endpoint);
  if (status.error_code() == C::CANCELLED && client_gone) {
    e.http_status = kClientClosedRequest;
    e.type = "cancelled";
    e.code = "client_closed_request";
  }
  return e;
}

OpenAiError ErrorFromGrpc(const grpc::Status& status, OpenAiEndpoint endpoint) {
  return ErrorFromGrpc(status, endpoint, "", false);
}

}  // namespace pdserve
