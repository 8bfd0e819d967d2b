// OpenAiHttpServer: the OpenAI-compatible HTTP front door of pdserve-router
// and pdserve-local (cpp-httplib; docs/http.md).
//
//   POST /v1/completions, POST /v1/chat/completions   generation (SSE with
//                                                     "stream": true)
//   GET  /v1/models                                   the served model
//   GET  /health     200 when options.health() is OK (a prefill and a decode
//                    worker reachable), else 503 with the reason
//   GET  /metrics    options.metrics->Render()
//
// One path: a request body is parsed (openai_protocol.h) into a
// GenerateRequest and sent to the router's own Generator service over
// options.channel (the gRPC server's in-process channel), so the admission
// queue, placement, retries and metrics are exactly the gRPC path's. Its
// request id (cmpl-<hex> / chatcmpl-<hex>) is the GenerateRequest's, the
// response's `id` and the X-Request-Id header; an incoming traceparent
// header and the API key travel as gRPC metadata.
//
// Threads: httplib serves each connection on one thread of a fixed pool of
// kThreads; a streaming response holds its thread until the stream ends
// (like llama-server), so at most kThreads requests are served at once and
// further connections wait for a thread. Streams are written to the socket
// chunk by chunk, never buffered whole. A failed write (the client went
// away) cancels the gRPC call; the router passes the cancellation down to
// the decode worker, which frees the request's KV.
//
// Security (SecurityOptions): with api_key set, /v1/* need
// "Authorization: Bearer KEY" (else 401 invalid_api_key); /health and
// /metrics stay open. With a certificate and key it serves HTTPS only;
// client certificates are not asked for on this public port.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/net/metrics.h"
#include "common/net/security_flags.h"

namespace pdserve {

struct OpenAiHttpOptions {
  std::string program;  // names the process in its log lines
  std::string host;     // bind address
  int port = 0;         // 0 picks one
  // The model served (its name is the OpenAI model id); must outlive the
  // server.
  const ModelConfig* config = nullptr;
  // The router's pdserve.v1.Generator.
  std::shared_ptr<grpc::Channel> channel;
  // OK when a prefill and a decode worker are reachable.
  std::function<absl::Status()> health;
  const MetricsRegistry* metrics = nullptr;  // nullptr: /metrics is 404
  SecurityOptions security;
};

class OpenAiHttpServer {
 public:
  static constexpr int kThreads = 32;
  // Socket read timeout (a request must arrive within it) and write timeout
  // (a client that reads nothing for this long is dropped, its call
  // cancelled).
  static constexpr int kReadTimeoutSeconds = 30;
  static constexpr int kWriteTimeoutSeconds = 10;
  static constexpr size_t kMaxBodyBytes = 8 << 20;

  // Binds and starts serving. InvalidArgument for missing options or TLS
  // files httplib cannot load; Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> Start(OpenAiHttpOptions options);
  // Stops accepting and joins the pool: a stream still running holds this
  // until its gRPC call ends (shut the gRPC server down first).
  ~OpenAiHttpServer();
  int port() const;

  class Impl;

 private:
  explicit OpenAiHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// For the --http-listen flag ("host:port", empty = off): nullptr when off;
// otherwise starts the server with options.host/port from `listen` and
// prints "PROGRAM: http on port N (host:N)". InvalidArgument for a bad
// address.
absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> ServeOpenAiHttp(const std::string& listen,
                                                                  OpenAiHttpOptions options);

}  // namespace pdserve
