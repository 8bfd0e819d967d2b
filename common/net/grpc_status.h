// absl::Status <-> grpc::Status. Modules return absl::Status; only the
// service layer speaks grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace pdserve {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// "UNAVAILABLE", "INVALID_ARGUMENT", ... for logs and CLI errors.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace pdserve
