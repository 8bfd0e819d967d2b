// absl::Status <-> grpc::Status. Modules return absl::Status; only the
// service layer speaks grpc::Status.
#pragma once

#include <string>

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
// Copies a marked status's side into the call's trailing metadata.
void AddFailedSideMetadata(const absl::Status& status, grpc::ServerContextBase* context);
// The side a finished call's server named, or "".
std::string FailedSide(const grpc::ClientContext& context);

// "UNAVAILABLE", "INVALID_ARGUMENT", ... for logs and CLI errors.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace pdserve
