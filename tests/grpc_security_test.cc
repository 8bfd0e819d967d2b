// common/net/security_flags and common/net/grpc_security: the flags' error
// paths, and the credentials on a real loopback server with certificates
// made at run time (tests/e2e/make_test_certs.sh, openssl): mTLS on an
// internal port, TLS on a public one, the API key in metadata.
#include "common/net/grpc_security.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/net/grpc_status.h"
#include "common/net/security_flags.h"
#include "common/net/server.h"
#include "gtest/gtest.h"
#include "pdserve/v1/generate.grpc.pb.h"
#include "tests/test_util.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, api_key);

namespace pdserve {
namespace {

using testing::TempDir;

// The certificates of make_test_certs.sh, made once for the whole binary.
const std::string& CertDir() {
  static const std::string* dir = [] {
    static TempDir tmp;
    const std::string cmd = absl::StrCat("bash ", PDSERVE_SOURCE_DIR, "/tests/e2e/make_test_certs.sh ",
                                         tmp.path(), " >/dev/null 2>&1");
    return new std::string(std::system(cmd.c_str()) == 0 ? tmp.path() : "");
  }();
  return *dir;
}

#define REQUIRE_CERTS() \
  if (CertDir().empty()) GTEST_SKIP() << "make_test_certs.sh failed (is openssl installed?)"

// Sets the four flags for one test and clears them after.
class FlagsTest : public ::testing::Test {
 protected:
  void Set(const std::string& cert, const std::string& key, const std::string& ca, const std::string& api_key = "") {
    absl::SetFlag(&FLAGS_tls_cert, cert);
    absl::SetFlag(&FLAGS_tls_key, key);
    absl::SetFlag(&FLAGS_tls_ca, ca);
    absl::SetFlag(&FLAGS_api_key, api_key);
  }
  void TearDown() override {
    Set("", "", "");
    unsetenv("PDSERVE_API_KEY");
  }
  std::string F(const std::string& name) { return CertDir() + "/" + name; }
};

TEST_F(FlagsTest, NothingGivenIsPlaintextWithoutKey) {
  Set("", "", "");
  auto o = SecurityOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->tls());
  EXPECT_FALSE(o->mtls());
  EXPECT_EQ(o->api_key, "");
  EXPECT_EQ(ChannelSecurityFor(*o).credentials, nullptr);
  EXPECT_TRUE(CheckInternalPortSecurity(*o).ok());
}

TEST_F(FlagsTest, CertWithoutKeyNamesBothFlags) {
  REQUIRE_CERTS();
  Set(F("node.crt"), "", "");
  auto o = SecurityOptionsFromFlags();
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  EXPECT_NE(o.status().message().find("--tls-key"), std::string::npos) << o.status();
}

TEST_F(FlagsTest, NonPemAndMissingFilesNameTheFlag) {
  REQUIRE_CERTS();
  Set(F("node.crt"), F("node.key"), F("notpem.txt"));
  auto o = SecurityOptionsFromFlags();
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  EXPECT_NE(o.status().message().find("--tls-ca"), std::string::npos) << o.status();
  EXPECT_NE(o.status().message().find("not a PEM file"), std::string::npos) << o.status();
  Set(F("node.crt"), F("no-such.key"), "");
  o = SecurityOptionsFromFlags();
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  EXPECT_NE(o.status().message().find("--tls-key"), std::string::npos) << o.status();
  EXPECT_NE(o.status().message().find("cannot read"), std::string::npos) << o.status();
}

TEST_F(FlagsTest, ApiKeyFlagWinsOverTheEnvironment) {
  setenv("PDSERVE_API_KEY", "from-env", 1);
  Set("", "", "");
  EXPECT_EQ(SecurityOptionsFromFlags()->api_key, "from-env");
  Set("", "", "", "from-flag");
  EXPECT_EQ(SecurityOptionsFromFlags()->api_key, "from-flag");
}

TEST_F(FlagsTest, AWorkerWithTlsButNoCaIsRefused) {
  REQUIRE_CERTS();
  Set(F("node.crt"), F("node.key"), "");
  auto o = SecurityOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->tls());
  EXPECT_FALSE(o->mtls());
  const absl::Status internal = InternalSecurityFromFlags().status();
  EXPECT_EQ(internal.code(), absl::StatusCode::kInvalidArgument) << internal;
  EXPECT_NE(internal.message().find("--tls-ca"), std::string::npos) << internal;
  Set(F("node.crt"), F("node.key"), F("ca.crt"));
  EXPECT_TRUE(InternalSecurityFromFlags().ok());
}

// Tokenize answers CheckApiKey's verdict: a stand-in for the router.
class KeyedService final : public pdserve::v1::Generator::CallbackService {
 public:
  explicit KeyedService(std::string key) : key_(std::move(key)) {}
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context, const pdserve::v1::TokenizeRequest*,
                                     pdserve::v1::TokenizeResponse*) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(CheckApiKey(*context, key_)));
    return reactor;
  }

 private:
  const std::string key_;
};

SecurityOptions Options(const std::string& dir, const std::string& cert, const std::string& ca) {
  auto read = [&](const std::string& name) {
    if (name.empty()) return std::string();
    std::ifstream in(dir + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  SecurityOptions o;
  o.cert_pem = read(cert.empty() ? "" : cert + ".crt");
  o.key_pem = read(cert.empty() ? "" : cert + ".key");
  o.ca_pem = read(ca);
  return o;
}

// One Tokenize call through a channel with `security`.
grpc::Status Call(int port, const ChannelSecurity& security) {
  auto stub = pdserve::v1::Generator::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port), security));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pdserve::v1::TokenizeRequest req;
  pdserve::v1::TokenizeResponse resp;
  return stub->Tokenize(&ctx, req, &resp);
}

TEST(GrpcCredentialsTest, InternalPortsRequireAClientCertificateOfTheCa) {
  REQUIRE_CERTS();
  const std::string& d = CertDir();
  KeyedService service("");
  auto server = StartServer("127.0.0.1:0", {&service},
                            ServerCredentialsFor(Options(d, "node", "ca.crt"), PortKind::kInternal));
  ASSERT_TRUE(server.ok()) << server.status();
  // A peer of the deployment: its certificate, the CA.
  EXPECT_TRUE(Call(server->port, ChannelSecurityFor(Options(d, "node", "ca.crt"))).ok());
  // TLS without a client certificate, one from another CA, plaintext.
  EXPECT_EQ(Call(server->port, ChannelSecurityFor(Options(d, "", "ca.crt"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(server->port, ChannelSecurityFor(Options(d, "rogue", "ca.crt"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(server->port, ChannelSecurity{}).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The client checks the server too: a CA that did not sign it.
  EXPECT_EQ(Call(server->port, ChannelSecurityFor(Options(d, "node", "other-ca.crt"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  server->server->Shutdown();
}

TEST(GrpcCredentialsTest, APublicPortIsTlsWithoutClientCertificateAndChecksTheKey) {
  REQUIRE_CERTS();
  const std::string& d = CertDir();
  KeyedService service("s3cret");
  auto server = StartServer("127.0.0.1:0", {&service},
                            ServerCredentialsFor(Options(d, "node", "ca.crt"), PortKind::kPublic));
  ASSERT_TRUE(server.ok()) << server.status();
  SecurityOptions client = Options(d, "", "ca.crt");
  client.api_key = "s3cret";
  EXPECT_TRUE(Call(server->port, ClientChannelSecurity(client)).ok());
  for (const char* key : {"", "s3cre", "s3cret2", "wrong!"}) {
    client.api_key = key;
    const grpc::Status st = Call(server->port, ClientChannelSecurity(client));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << key;
    EXPECT_EQ(st.error_message().find("s3cret"), std::string::npos) << st.error_message();
  }
  // --tls-server-name: the certificate has no SAN "elsewhere".
  client.api_key = "s3cret";
  client.server_name = "pdserve-internal";
  EXPECT_TRUE(Call(server->port, ClientChannelSecurity(client)).ok());
  client.server_name = "elsewhere";
  EXPECT_EQ(Call(server->port, ClientChannelSecurity(client)).error_code(), grpc::StatusCode::UNAVAILABLE);
  server->server->Shutdown();
}

TEST(GrpcCredentialsTest, TheKeyTravelsOnPlaintextChannelsToo) {
  KeyedService service("k");
  auto server = StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Call(server->port, ChannelSecurity{nullptr, "", "k"}).ok());
  EXPECT_EQ(Call(server->port, ChannelSecurity{}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  server->server->Shutdown();
}

}  // namespace
}  // namespace pdserve
