// The security flags, defined once and linked into every server and client
// binary (one default each):
//   --tls-cert, --tls-key   this process's certificate chain and private key
//                           (PEM files); with them every port it serves is TLS
//   --tls-ca                the CA (PEM) that peers' certificates must chain
//                           to: servers then require client certificates
//                           (mTLS between router and workers), clients
//                           verify the server against it
//   --tls-server-name       the name peers' certificates are checked
//                           against instead of the dialled host (workers
//                           dialled by pod IP, one shared certificate)
//   --api-key               the public endpoints' key (or PDSERVE_API_KEY):
//                           a bearer token on HTTP, `authorization: Bearer
//                           KEY` metadata on gRPC; empty = no key
//
//   SecurityOptionsFromFlags  the flags, validated, with the files read
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

struct SecurityOptions {
  // PEM contents (not paths); empty when not given.
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;
  // The paths they came from (the HTTP server's TLS context takes paths).
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  // --tls-server-name: when set, the name a server's certificate must carry
  // for this process's channels (instead of the host of the address).
  std::string server_name;
  // The key clients must present; empty = none required.
  std::string api_key;

  // TLS is on for this process's servers (cert and key given).
  bool tls() const { return !cert_pem.empty(); }
  // Peers must present a certificate signed by ca_pem (mTLS).
  bool mtls() const { return tls() && !ca_pem.empty(); }
};

// Reads the flags and their files. InvalidArgument naming the flag when
// only one of --tls-cert/--tls-key is given, or a file cannot be read or is
// not PEM. --api-key wins over PDSERVE_API_KEY.
absl::StatusOr<SecurityOptions> SecurityOptionsFromFlags();

}  // namespace pdserve
