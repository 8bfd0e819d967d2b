// Which worker failures the router retries, and which attempt's status a
// client gets when every attempt failed.
#pragma once

#include <string>

#include <grpcpp/support/status.h>

#include "absl/strings/str_cat.h"

namespace pdserve {

// Codes after which another worker may succeed.
inline bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// Codes of a failed KV hand-off (the prefill worker marks them as the
// decode side's) after which another decode worker may succeed: the worker
// restarted and forgot the request (NOT_FOUND), refused or broke the stream.
inline bool RetryableOnAnotherDecode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::OK:
      return false;
    default:
      return true;
  }
}

// Codes of a hand-off the decode worker rejected as damaged (a checksum,
// order or size check failed: FAILED_PRECONDITION) or that arrived short
// (DATA_LOSS). Damage in transit implicates neither worker for sure, so
// the first one in a round of placements is retried with no worker
// excluded (the same pair may be chosen again); a second one excludes the
// decode worker, as RetryableOnAnotherDecode does.
inline bool DamagedHandoff(grpc::StatusCode code) {
  return code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::DATA_LOSS;
}

// How much an attempt's status tells the client, for the final answer when
// every attempt failed: a worker that was full (capacity) says the most, a
// worker's own error next, the router's "no other worker to try" least.
inline int Informativeness(const grpc::Status& st, bool synthetic) {
  if (synthetic) return 0;
  if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) return 3;
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) return 1;
  return 2;
}

// A decode worker's OUT_OF_RANGE at admission: the request needs more KV
// than that worker's whole budget (--kv-budget-mb), so it can never fit
// there, unlike a full worker (RESOURCE_EXHAUSTED), which may have room
// later. The router keeps such a worker out for the rest of the request
// (every round of placements), and another worker with a larger budget may
// take it; nothing was prefilled. When none does, the client gets
// NeverFitsStatus: RESOURCE_EXHAUSTED, with the trailing metadata
// kReasonTrailerKey = kReasonKvBudgetExceeded, which tells the OpenAI front
// that it is no rate limit (HTTP 400, openai_status.h).
inline bool NeverFitsOnThisDecode(grpc::StatusCode code) { return code == grpc::StatusCode::OUT_OF_RANGE; }
inline constexpr char kReasonTrailerKey[] = "pdserve-reason";
inline constexpr char kReasonKvBudgetExceeded[] = "kv_budget_exceeded";

// The client's status for a request no decode worker's budget can hold;
// `report` is the last such worker's (annotated) refusal, with the numbers.
inline grpc::Status NeverFitsStatus(const grpc::Status& report) {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("the request's KV does not fit any decode worker's whole KV budget "
                                   "(--kv-budget-mb); refused before any prefill: ",
                                   report.error_message()));
}

// "decode worker 10.0.0.7:50052: <message>".
inline grpc::Status Annotate(const grpc::Status& st, const char* what, const std::string& address) {
  return grpc::Status(st.error_code(), absl::StrCat(what, " ", address, ": ", st.error_message()));
}

}  // namespace pdserve
