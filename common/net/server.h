// Starting and stopping gRPC servers the same way in every binary: health
// (grpc.health.v1) and reflection on, message sizes bounded by
// kMaxGrpcMessageBytes in both directions, a bound port
// that can be 0 (the kernel picks), insecure or with the credentials given
// (common/net/grpc_security.h makes them from the --tls-* flags).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve {

class MetricsRegistry;

// The gRPC message size limit, the same in both directions and on both ends:
// 16 MiB, a 4 MiB KV hand-off chunk plus framing with room to spare (gRPC's
// own defaults are 4 MiB received and unlimited sent). Set explicitly on
// every server (StartServer: SetMaxReceiveMessageSize and
// SetMaxSendMessageSize) and on every channel (MakeChannel, or
// DefaultChannelArguments for a channel built elsewhere). A larger message
// fails with RESOURCE_EXHAUSTED on the side that would send or receive it.
inline constexpr int kMaxGrpcMessageBytes = 16 << 20;

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// Serves `services` on `listen_address` ("host:port") with `credentials`
// (nullptr: insecure). Unavailable with the address when it cannot bind.
absl::StatusOr<StartedServer> StartServer(const std::string& listen_address,
                                          const std::vector<grpc::Service*>& services,
                                          std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

// The channel arguments every pdserve client uses: kMaxGrpcMessageBytes in
// both directions, no HTTP proxy, and a short reconnect backoff (100 ms to
// 1 s) so a dead worker fails fast. Start from these when a caller needs
// more arguments of its own.
grpc::ChannelArguments DefaultChannelArguments();

// How a client channel authenticates (grpc_security.h fills it from the
// flags); the default is insecure, without a key.
struct ChannelSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // nullptr: insecure
  // Non-empty: the name the server's certificate must carry, instead of the
  // host of the address (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG).
  std::string server_name;
  // Non-empty: every call sends `authorization: Bearer <api_key>` metadata.
  std::string api_key;
};

// A client channel with DefaultChannelArguments() (or `args`) and
// `security`.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ChannelSecurity& security = {});
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, grpc::ChannelArguments args,
                                           const ChannelSecurity& security);

// Blocks the calling thread until SIGINT or SIGTERM arrives; returns the
// signal. Call BlockShutdownSignals() first in main, before any thread
// starts, so that only this wait sees them.
void BlockShutdownSignals();
int WaitForShutdownSignal();

// What ServeUntilShutdownSignal serves, and how it stops.
struct ServeOptions {
  std::string program;       // names the process in its log lines
  std::string listen;        // the gRPC address, "host:port"
  std::string metrics_host;  // where /metrics binds (ServeMetrics)
  int metrics_port = -1;     // 0 picks one, -1 turns /metrics off
  absl::Duration drain_timeout;  // how long streams may finish on a signal
  std::string serving_note;      // appended to the "serving on port N" line
  std::shared_ptr<grpc::ServerCredentials> credentials;  // the gRPC port's; nullptr: insecure
};

// Starts what else a process serves on top of its gRPC server, e.g. the
// OpenAI HTTP server on the server's in-process channel; what it returns
// lives until the gRPC server has shut down.
using FrontendStarter = std::function<absl::StatusOr<std::shared_ptr<void>>(grpc::Server*)>;

// A worker's main loop: serves `services` (StartServer) and /metrics, logs
// "<program>: serving on port N<serving_note>", blocks until SIGINT or
// SIGTERM (call BlockShutdownSignals first), logs "<program>: signal S,
// draining" and shuts the server down, letting calls run for
// drain_timeout. `start_frontend`, when given, runs once the server is up.
// Returns StartServer's, ServeMetrics's or start_frontend's error when one
// cannot start (the caller exits).
absl::Status ServeUntilShutdownSignal(const ServeOptions& options, const std::vector<grpc::Service*>& services,
                                      const MetricsRegistry* metrics, const FrontendStarter& start_frontend = nullptr);

}  // namespace pdserve
