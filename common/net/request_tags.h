// What identifies a request across the router and its workers in the logs:
// the client-visible request id and the W3C trace context, carried as gRPC
// metadata (the internal proto has only the worker-level id).
//
//   kRequestIdKey, kTraceparentKey   the metadata keys
//   ValidTraceparent                 a loose W3C traceparent check
//   MetadataSafeId                   a request id as a metadata value
//   RequestTags                      both, read from a server call's
//                                    metadata or added to a client call's
//   LogWorkerRequest                 a worker's request line
#pragma once

#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/string_view.h"
#include "common/util/log.h"

namespace pdserve {

inline constexpr char kRequestIdKey[] = "x-request-id";
inline constexpr char kTraceparentKey[] = "traceparent";

// True for "VV-<32 hex>-<16 hex>-<2 hex>" (lowercase hex; version ff, an
// all-zero trace id or parent id are invalid), at most 256 characters; a
// version other than 00 may carry more fields after a '-'.
bool ValidTraceparent(absl::string_view value);

// `id` as a printable-ASCII metadata value: C-escaped, at most 128
// characters of the id.
std::string MetadataSafeId(absl::string_view id);

struct RequestTags {
  std::string request_id;   // the client-visible id ("" when unknown)
  std::string traceparent;  // a valid traceparent, or ""

  // From a server call's client metadata; an invalid traceparent is
  // dropped, the request id is bounded.
  static RequestTags FromMetadata(const grpc::ServerContextBase& context);
  // Adds the non-empty tags to a client call's metadata (before it starts).
  void AddTo(grpc::ClientContext* context) const;
};

// A worker's line for one request: in text "PROGRAM: request WID (ID):
// CODE, DETAILS[: error]"; in JSON msg "request" with request_id (the
// client-visible one, from the metadata), worker_request_id, status, error,
// traceparent when present, then `fields`.
void LogWorkerRequest(const RequestTags& tags, absl::string_view worker_request_id, const grpc::Status& status,
                      absl::string_view details, log::Fields fields);

}  // namespace pdserve
