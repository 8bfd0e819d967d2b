// Starting and stopping gRPC servers the same way in every binary: health
// (grpc.health.v1) and reflection on, hand-off-sized messages, a bound port
// that can be 0 (the kernel picks).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace pdserve {

// Messages up to this size are accepted: a 4 MiB KV payload plus framing.
inline constexpr int kMaxGrpcMessageBytes = 16 << 20;

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// Serves `services` on `listen_address` ("host:port"). Unavailable with the
// address when it cannot bind.
absl::StatusOr<StartedServer> StartServer(const std::string& listen_address,
                                          const std::vector<grpc::Service*>& services);

// A client channel with the same message limit (and no proxy surprises).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Blocks the calling thread until SIGINT or SIGTERM arrives; returns the
// signal. Call BlockShutdownSignals() first in main, before any thread
// starts, so that only this wait sees them.
void BlockShutdownSignals();
int WaitForShutdownSignal();

}  // namespace pdserve
