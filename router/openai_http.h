// OpenAiHttpServer: the OpenAI-compatible HTTP front door of pdserve-router
// and pdserve-local (on HttpServer, common/net/http_server.h; docs/http.md).
//
//   POST /v1/completions, POST /v1/chat/completions   generation (SSE with
//                                                     "stream": true); a
//                                                     harmony model's chat
//                                                     answer is split into
//                                                     reasoning_content and
//                                                     content (harmony_parser.h)
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
// Connections: HttpServer's one event-loop thread reads every request with
// hard header and body deadlines, so slow, idle or half-sent connections
// hold no thread; only a complete request reaches a handler thread (kThreads
// for generation, a separate small pool for the GETs). A streaming response
// holds its handler thread until the stream ends, and is written to the
// socket chunk by chunk, never buffered whole. A failed write (the client
// went away) cancels the gRPC call; the router passes the cancellation down
// to the workers, which free the request's KV.
//
// Clients and deadlines: each HTTP caller is its own client for the
// router's --max-inflight-per-client (by API key when --api-key is set,
// else by peer address; sent as x-pdserve-client metadata, which the router
// trusts from its in-process channel only). Every call gets a deadline:
// request_timeout, or less when the client sends "X-Request-Timeout:
// SECONDS"; past it the answer is 504 (mid-stream: an SSE error event).
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
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/model/config.h"
#include "common/net/metrics.h"
#include "common/net/security_flags.h"
#include "common/tokenizer/tokenizer.h"

namespace pdserve {

struct OpenAiHttpOptions {
  std::string program;  // names the process in its log lines
  std::string host;     // bind address
  int port = 0;         // 0 picks one
  // The model served (its name is the OpenAI model id); must outlive the
  // server.
  const ModelConfig* config = nullptr;
  // The model's tokenizer (not owned; must outlive the server): a harmony
  // model's chat (config chat_format "harmony") is rendered and parsed with
  // it (router/harmony_chat.h). Without it, or when it lacks the harmony
  // tokens, such a model's chat is refused with the reason (400).
  const Tokenizer* tokenizer = nullptr;
  // The router's pdserve.v1.Generator.
  std::shared_ptr<grpc::Channel> channel;
  // OK when a prefill and a decode worker are reachable.
  std::function<absl::Status()> health;
  const MetricsRegistry* metrics = nullptr;  // nullptr: /metrics is 404
  SecurityOptions security;
  // Each request's deadline unless the client asks for less
  // (--http-request-timeout-s).
  absl::Duration request_timeout = absl::Seconds(600);
};

class OpenAiHttpServer {
 public:
  // Generation handlers running at once (the router's admission queue
  // decides what runs; complete requests past this wait in HttpServer's
  // queue, holding no thread).
  static constexpr int kThreads = 64;
  // Open connections; past it a new one is answered 503 and closed.
  static constexpr int kMaxConnections = 1024;
  // Hard deadlines: the headers within kHeaderTimeout of the connection (or
  // of the previous response), the body within kBodyTimeout after them; an
  // idle keep-alive connection is closed after kIdleTimeout; a client that
  // reads nothing for kWriteTimeout is dropped and its call cancelled.
  static constexpr absl::Duration kHeaderTimeout = absl::Seconds(10);
  static constexpr absl::Duration kBodyTimeout = absl::Seconds(30);
  static constexpr absl::Duration kIdleTimeout = absl::Seconds(5);
  static constexpr absl::Duration kWriteTimeout = absl::Seconds(10);
  static constexpr size_t kMaxBodyBytes = 8 << 20;

  // Binds and starts serving. InvalidArgument for missing options or TLS
  // TLS files that cannot be loaded; Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> Start(OpenAiHttpOptions options);
  // Stops accepting and joins the handlers: a stream still running holds
  // this until its gRPC call ends (shut the gRPC server down first).
  ~OpenAiHttpServer();
  int port() const;

  class Impl;

 private:
  explicit OpenAiHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The token of an "Authorization: Bearer TOKEN" header (the scheme in any
// case, as RFC 9110 says; spaces around the token trimmed); empty when the
// header is missing or names another scheme.
std::string BearerToken(absl::string_view authorization);

// Who an HTTP caller is for --max-inflight-per-client and the access log:
// "key:<8 hex digits of a hash of its key>" when API keys are in use and it
// sent one, else "http:<peer address>" (no port: one client per host).
std::string HttpClientIdentity(absl::string_view bearer_token, bool keys_in_use, absl::string_view peer_address);

// A request's deadline from now: `server_default`, or less when the client
// sent "X-Request-Timeout: SECONDS" (a positive decimal; more than the
// default is capped to it). InvalidArgument naming the header and value
// otherwise.
absl::StatusOr<absl::Duration> RequestTimeout(const std::string* header, absl::Duration server_default);

// For the --http-listen flag ("host:port", empty = off): nullptr when off;
// otherwise starts the server with options.host/port from `listen` and
// prints "PROGRAM: http on port N (host:N)". InvalidArgument for a bad
// address.
absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> ServeOpenAiHttp(const std::string& listen,
                                                                  OpenAiHttpOptions options);

}  // namespace pdserve
