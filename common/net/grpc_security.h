// SecurityOptions (common/net/security_flags.h) as gRPC credentials, and
// the API key check of the public Generator:
//   ServerCredentialsFor      a port's credentials: insecure without TLS;
//                             TLS on a public port; mTLS (client
//                             certificates required, verified against the
//                             CA) on an internal one
//   CheckInternalPortSecurity a worker's rule: TLS without --tls-ca is
//                             refused (no internal port serves TLS without
//                             checking client certificates)
//   InternalSecurityFromFlags the flags with that rule applied
//   ChannelSecurityFor        how this process dials its peers (TLS with the
//                             CA, this process's certificate as the client
//                             certificate), or insecure
//   ClientChannelSecurity     the same plus the API key (public clients);
//                             ClientSecurityFromFlags, of the flags
//   CheckApiKey               a call's `authorization: Bearer KEY` metadata
//   ConstantTimeEquals        key comparison that leaks no prefix length
//                             (CheckApiKey's, and the HTTP front's)
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/net/security_flags.h"
#include "common/net/server.h"

namespace pdserve {

enum class PortKind {
  kPublic,    // the router's Generator: TLS; callers authenticate with the API key
  kInternal,  // a worker's port: mTLS, peers' certificates must chain to the CA
};

// Insecure when TLS is off. kInternal needs the CA (CheckInternalPortSecurity
// first): without one it would ask for no client certificate.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const SecurityOptions& options, PortKind kind);

// InvalidArgument when --tls-cert/--tls-key are given without --tls-ca.
absl::Status CheckInternalPortSecurity(const SecurityOptions& options);
// SecurityOptionsFromFlags, then CheckInternalPortSecurity: the flags of a
// process that serves or dials internal ports (router, prefill, decode).
absl::StatusOr<SecurityOptions> InternalSecurityFromFlags();

// TLS when the process has a CA or a certificate: the server is verified
// against the CA (the system roots without one), the process's certificate
// and key go along as the client certificate; the server name override is
// --tls-server-name. Insecure otherwise. No API key.
ChannelSecurity ChannelSecurityFor(const SecurityOptions& options);
// ChannelSecurityFor with the API key (a client of the public Generator).
ChannelSecurity ClientChannelSecurity(const SecurityOptions& options);
// ClientChannelSecurity of the flags (--tls-ca, --api-key, ...): a client
// binary's channel to the router. A client that needs the SecurityOptions
// for more than this channel (pdserve-bench: the HTTP key too) reads them
// once with SecurityOptionsFromFlags and calls the functions above.
absl::StatusOr<ChannelSecurity> ClientSecurityFromFlags();

// OK when `api_key` is empty or the call carries `authorization: Bearer
// <api_key>` (compared in constant time); Unauthenticated otherwise, with a
// message that never contains a key.
absl::Status CheckApiKey(const grpc::ServerContextBase& context, const std::string& api_key);

// Equal contents, in time that depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace pdserve
