#include "common/net/grpc_status.h"

#include <string>

#include "absl/strings/cord.h"

namespace pdserve {
namespace {
constexpr char kFailedSidePayload[] = "pdserve/failed-side";
constexpr char kNotBegunPayload[] = "pdserve/handoff-not-begun";

std::string Trailer(const grpc::ClientContext& context, const char* key) {
  const auto& md = context.GetServerTrailingMetadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}
}  // namespace

absl::Status MarkFailedSide(absl::Status status, const char* side) {
  status.SetPayload(kFailedSidePayload, absl::Cord(side));
  return status;
}

std::string FailedSide(const absl::Status& status) {
  auto side = status.GetPayload(kFailedSidePayload);
  return side.has_value() ? std::string(*side) : std::string();
}

std::string FailedSide(const grpc::ClientContext& context) { return Trailer(context, kFailedSideKey); }

absl::Status MarkHandoffNotBegun(absl::Status status) {
  status.SetPayload(kNotBegunPayload, absl::Cord("1"));
  return status;
}

bool HandoffNotBegun(const absl::Status& status) { return status.GetPayload(kNotBegunPayload).has_value(); }

bool HandoffNotBegun(const grpc::ClientContext& context) { return Trailer(context, kHandoffNotBegunKey) == "1"; }

Trailers MarkTrailers(const absl::Status& status) {
  Trailers out;
  const std::string side = FailedSide(status);
  if (!side.empty()) out.emplace_back(kFailedSideKey, side);
  if (HandoffNotBegun(status)) out.emplace_back(kHandoffNotBegunKey, "1");
  return out;
}

void AddMarkTrailers(const absl::Status& status, grpc::ServerContextBase* context) {
  for (const auto& [key, value] : MarkTrailers(status)) context->AddTrailingMetadata(key, value);
}

// The two enums share the canonical code numbers.
grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

}  // namespace pdserve
