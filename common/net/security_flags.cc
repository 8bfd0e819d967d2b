#include "common/net/security_flags.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of this process; with --tls-key, its ports serve TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that peers must chain to: servers then require client certificates (mTLS), clients verify "
          "the server with it.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name the servers' certificates are checked against instead of the dialled host (e.g. one shared "
          "certificate's DNS name when workers are dialled by pod IP); empty = the host.");
ABSL_FLAG(std::string, api_key, "",
          "Key the public endpoints require (HTTP bearer token, gRPC 'authorization: Bearer KEY' metadata); "
          "default: $PDSERVE_API_KEY, empty = none.");

namespace pdserve {
namespace {

// The file's contents, which must look like PEM.
absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": not a PEM file (no -----BEGIN line)"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<SecurityOptions> SecurityOptionsFromFlags() {
  SecurityOptions o;
  o.cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.key_file = absl::GetFlag(FLAGS_tls_key);
  o.ca_file = absl::GetFlag(FLAGS_tls_ca);
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (!o.cert_file.empty()) {
    auto cert = ReadPem("tls-cert", o.cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("tls-key", o.key_file);
    if (!key.ok()) return key.status();
    o.cert_pem = *std::move(cert);
    o.key_pem = *std::move(key);
  }
  if (!o.ca_file.empty()) {
    auto ca = ReadPem("tls-ca", o.ca_file);
    if (!ca.ok()) return ca.status();
    o.ca_pem = *std::move(ca);
  }
  o.server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.api_key = absl::GetFlag(FLAGS_api_key);
  if (o.api_key.empty()) {
    const char* env = std::getenv("PDSERVE_API_KEY");
    if (env != nullptr) o.api_key = env;
  }
  return o;
}

}  // namespace pdserve
