// absl::Status <-> grpc::Status. Modules return absl::Status; only the
// service layer speaks grpc::Status.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace pdserve {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Which side of a KV hand-off failed, carried as data: an absl::Status
// payload inside a worker, the trailing metadata `pdserve-failed-side`
// ("prefill" or "decode") on the wire. The router uses it to choose the
// worker to avoid on retry.
inline constexpr char kFailedSideKey[] = "pdserve-failed-side";
absl::Status MarkFailedSide(absl::Status status, const char* side);
// "" when unmarked.
std::string FailedSide(const absl::Status& status);
// The side a finished call's server named, or "".
std::string FailedSide(const grpc::ClientContext& context);

// A prefill-side failure of a hand-off that never began: no header reached
// the decode worker within its --handoff-timeout-s. Its prefill worker may
// only have been busy, so the router places the request elsewhere but does
// not mark that worker unhealthy. Trailing metadata
// `pdserve-handoff-not-begun: 1`.
inline constexpr char kHandoffNotBegunKey[] = "pdserve-handoff-not-begun";
absl::Status MarkHandoffNotBegun(absl::Status status);
bool HandoffNotBegun(const absl::Status& status);
bool HandoffNotBegun(const grpc::ClientContext& context);

// The trailing metadata that carries a status's marks (its failed side,
// a hand-off that never began), in that order; empty when unmarked.
using Trailers = std::vector<std::pair<std::string, std::string>>;
Trailers MarkTrailers(const absl::Status& status);
// Adds MarkTrailers(status) to the call's trailing metadata.
void AddMarkTrailers(const absl::Status& status, grpc::ServerContextBase* context);

// "UNAVAILABLE", "INVALID_ARGUMENT", ... for logs and CLI errors.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace pdserve
