// The protocols pdserve-bench measures a server through, one class each
// behind bench::Backend (bench/load_gen.h):
//   GrpcBackend     pdserve.v1.Generator/Generate on the router (the default)
//   OpenAiBackend   POST /v1/completions with stream: true on the HTTP API,
//                   the SSE chunks parsed as they arrive (a chunk holding a
//                   choice is a token message, as a gRPC message with tokens)
//   MakeBackend     picks one by --backend's name and connects it
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/net/server.h"
#include "bench/load_gen.h"

namespace pdserve::bench {

struct BackendOptions {
  std::string name;      // "grpc" or "openai"
  std::string router;    // grpc: host:port
  std::string base_url;  // openai: http://host:port (a trailing /v1 is allowed)
  std::string model;     // openai: the model field; "" = the first of GET /v1/models
  std::string api_key;   // "" = none; a bearer token on HTTP, authorization metadata on gRPC
  ChannelSecurity grpc_security;  // grpc: TLS (ChannelSecurityFor the flags); api_key above is the metadata
  double deadline_s = 0;  // openai: the read timeout (no bytes for this long fails); 0 = an hour
};

// The backend `opt.name`, connected: Unavailable when the server cannot be
// reached within 10 s, InvalidArgument for an unknown name or a bad URL.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& opt);

}  // namespace pdserve::bench
