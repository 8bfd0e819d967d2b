#include "common/net/grpc_security.h"

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace pdserve {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const SecurityOptions& options, PortKind kind) {
  if (!options.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({options.key_pem, options.cert_pem});
  if (kind == PortKind::kInternal && options.mtls()) {
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    ssl.pem_root_certs = options.ca_pem;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::Status CheckInternalPortSecurity(const SecurityOptions& options) {
  if (options.tls() && !options.mtls()) {
    return absl::InvalidArgumentError(
        "--tls-cert/--tls-key without --tls-ca: a worker's internal port is served with mTLS only (give "
        "--tls-ca, the CA the router's and the other workers' certificates chain to)");
  }
  return absl::OkStatus();
}

absl::StatusOr<SecurityOptions> InternalSecurityFromFlags() {
  absl::StatusOr<SecurityOptions> options = SecurityOptionsFromFlags();
  if (!options.ok()) return options.status();
  if (absl::Status st = CheckInternalPortSecurity(*options); !st.ok()) return st;
  return options;
}

ChannelSecurity ChannelSecurityFor(const SecurityOptions& options) {
  ChannelSecurity out;
  if (!options.tls() && options.ca_pem.empty()) return out;
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.ca_pem;
  ssl.pem_private_key = options.key_pem;
  ssl.pem_cert_chain = options.cert_pem;
  out.credentials = grpc::SslCredentials(ssl);
  out.server_name = options.server_name;
  return out;
}

ChannelSecurity ClientChannelSecurity(const SecurityOptions& options) {
  ChannelSecurity out = ChannelSecurityFor(options);
  out.api_key = options.api_key;
  return out;
}

absl::StatusOr<ChannelSecurity> ClientSecurityFromFlags() {
  absl::StatusOr<SecurityOptions> options = SecurityOptionsFromFlags();
  if (!options.ok()) return options.status();
  return ClientChannelSecurity(*options);
}

absl::Status CheckApiKey(const grpc::ServerContextBase& context, const std::string& api_key) {
  if (api_key.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("this router requires an API key: send 'authorization: Bearer <key>' metadata");
  }
  absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWithIgnoreCase(value, kBearer) || !ConstantTimeEquals(value.substr(kBearer.size()), api_key)) {
    return absl::UnauthenticatedError("invalid API key in the 'authorization' metadata");
  }
  return absl::OkStatus();
}

}  // namespace pdserve
