#include "common/net/server.h"

#include <chrono>
#include <csignal>
#include <cstdio>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "common/net/metrics.h"
#include "common/util/log.h"

namespace pdserve {

absl::StatusOr<StartedServer> StartServer(const std::string& listen_address,
                                          const std::vector<grpc::Service*>& services,
                                          std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer out;
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(listen_address, credentials, &out.port);
  // Both directions, explicitly (kMaxGrpcMessageBytes in server.h).
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  // No SO_REUSEPORT (gRPC's default on Linux): a second server given the
  // same port must fail to bind, not silently take half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* s : services) builder.RegisterService(s);
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen_address));
  }
  return out;
}

grpc::ChannelArguments DefaultChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Fail fast on a dead worker instead of backing off for seconds.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

namespace {

// Adds `authorization: Bearer KEY` to every call's initial metadata (call
// credentials would do it on TLS channels only).
class ApiKeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(std::string header) : header_(std::move(header)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", header_);
    }
    methods->Proceed();
  }

 private:
  const std::string header_;
};

class ApiKeyInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(const std::string& api_key) : header_(absl::StrCat("Bearer ", api_key)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new ApiKeyInterceptor(header_);
  }

 private:
  const std::string header_;
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ChannelSecurity& security) {
  return MakeChannel(address, DefaultChannelArguments(), security);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, grpc::ChannelArguments args,
                                           const ChannelSecurity& security) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = security.credentials;
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  if (!security.server_name.empty()) args.SetSslTargetNameOverride(security.server_name);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!security.api_key.empty()) interceptors.push_back(std::make_unique<ApiKeyInterceptorFactory>(security.api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args, std::move(interceptors));
}

namespace {
sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  sigset_t set = ShutdownSignals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

absl::Status ServeUntilShutdownSignal(const ServeOptions& options, const std::vector<grpc::Service*>& services,
                                      const MetricsRegistry* metrics, const FrontendStarter& start_frontend) {
  absl::StatusOr<StartedServer> server = StartServer(options.listen, services, options.credentials);
  if (!server.ok()) return server.status();
  log::Info(absl::StrCat("serving on port ", server->port, options.serving_note), {{"port", server->port}},
            log::TextPrefix::Named(options.program));
  auto metrics_server = ServeMetrics(options.metrics_host, options.metrics_port, metrics, options.program);
  if (!metrics_server.ok()) return metrics_server.status();
  absl::StatusOr<std::shared_ptr<void>> frontend = std::shared_ptr<void>();
  if (start_frontend) frontend = start_frontend(server->server.get());
  if (!frontend.ok()) return frontend.status();

  const int sig = WaitForShutdownSignal();
  log::Info(absl::StrCat("signal ", sig, ", draining"), {{"signal", sig}}, log::TextPrefix::Named(options.program));
  server->server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoSeconds(options.drain_timeout));
  return absl::OkStatus();
}

}  // namespace pdserve
