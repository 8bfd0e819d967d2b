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
                                          const std::vector<grpc::Service*>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer out;
  builder.AddListeningPort(listen_address, grpc::InsecureServerCredentials(), &out.port);
  // Both directions, explicitly (kMaxGrpcMessageBytes in server.h).
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
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

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), DefaultChannelArguments());
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
                                      const MetricsRegistry* metrics) {
  absl::StatusOr<StartedServer> server = StartServer(options.listen, services);
  if (!server.ok()) return server.status();
  log::Info(absl::StrCat("serving on port ", server->port, options.serving_note), {{"port", server->port}},
            log::TextPrefix::Named(options.program));
  auto metrics_server = ServeMetrics(options.metrics_host, options.metrics_port, metrics, options.program);
  if (!metrics_server.ok()) return metrics_server.status();

  const int sig = WaitForShutdownSignal();
  log::Info(absl::StrCat("signal ", sig, ", draining"), {{"signal", sig}}, log::TextPrefix::Named(options.program));
  server->server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoSeconds(options.drain_timeout));
  return absl::OkStatus();
}

}  // namespace pdserve
