#include "common/net/request_tags.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/net/grpc_status.h"

namespace pdserve {
namespace {

bool LowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(absl::string_view s) { return s.find_first_not_of('0') == absl::string_view::npos; }

absl::string_view Metadata(const grpc::ServerContextBase& context, const char* key) {
  const auto& md = context.client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

}  // namespace

bool ValidTraceparent(absl::string_view v) {
  constexpr size_t kLen = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
  if (v.size() < kLen || v.size() > 256) return false;
  if (v[2] != '-' || v[35] != '-' || v[52] != '-') return false;
  const absl::string_view version = v.substr(0, 2), trace = v.substr(3, 32), parent = v.substr(36, 16),
                         flags = v.substr(53, 2);
  if (!LowerHex(version) || !LowerHex(trace) || !LowerHex(parent) || !LowerHex(flags)) return false;
  if (version == "ff" || AllZero(trace) || AllZero(parent)) return false;
  if (v.size() == kLen) return true;
  // Version 00 has exactly these fields; a later version may add more.
  return version != "00" && v[kLen] == '-';
}

std::string MetadataSafeId(absl::string_view id) { return absl::CHexEscape(id.substr(0, 128)); }

RequestTags RequestTags::FromMetadata(const grpc::ServerContextBase& context) {
  RequestTags tags;
  // Printable ASCII already (gRPC checks); bounded like MetadataSafeId's.
  tags.request_id = std::string(Metadata(context, kRequestIdKey).substr(0, 4 * 128));
  const absl::string_view tp = Metadata(context, kTraceparentKey);
  if (ValidTraceparent(tp)) tags.traceparent = std::string(tp);
  return tags;
}

void RequestTags::AddTo(grpc::ClientContext* context) const {
  if (!request_id.empty()) context->AddMetadata(kRequestIdKey, request_id);
  if (!traceparent.empty()) context->AddMetadata(kTraceparentKey, traceparent);
}

void LogWorkerRequest(const RequestTags& tags, absl::string_view worker_request_id, const grpc::Status& status,
                      absl::string_view details, log::Fields fields) {
  const std::string error = status.error_message().substr(0, 512);
  if (log::CurrentFormat() == log::Format::kText) {
    log::Info(absl::StrCat("request ", worker_request_id, tags.request_id.empty() ? "" : " (", tags.request_id,
                           tags.request_id.empty() ? "" : ")", ": ", GrpcCodeName(status.error_code()), ", ", details,
                           status.ok() ? "" : ": ", absl::CHexEscape(error)));
    return;
  }
  log::Fields f = {{"request_id", tags.request_id},
                   {"worker_request_id", worker_request_id},
                   {"status", GrpcCodeName(status.error_code())}};
  if (!status.ok()) f.emplace_back("error", error);
  if (!tags.traceparent.empty()) f.emplace_back("traceparent", tags.traceparent);
  for (log::Field& field : fields) f.push_back(std::move(field));
  log::Info("request", f);
}

}  // namespace pdserve
