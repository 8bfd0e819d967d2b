// An event-driven HTTP/1.1 server (plain or TLS) for the public OpenAI front
// and the /metrics ports: one epoll thread reads every request, worker pools
// run the handlers on complete requests only, so slow, idle or partial
// clients never hold a worker.
//
// Contents:
//   HttpHeader, HttpRequest  - one parsed request as the handler sees it.
//   HttpResponseWriter       - the handler's one response: Send (whole, with
//                              Content-Length) or StartStream / Write /
//                              EndStream (chunked), fd() to poll the peer.
//   HttpHandler              - the function every complete request runs.
//   HttpServerOptions        - address, TLS files, connection cap, the hard
//                              deadlines (header, body, idle, write), size
//                              limits, pool sizes, the fast lane, the body of
//                              the server's own errors.
//   HttpServer               - Start (binds, starts the threads), port(),
//                              stats(), the destructor (stops and joins).
//
// How a connection lives (http_server.cc):
//   accept -> [TLS handshake] -> reading the head (header_timeout, hard, from
//   accept or the end of the previous response) -> reading the body
//   (body_timeout, hard, from the end of the head) -> queued on a pool, off
//   epoll -> the handler writes from its own thread (each write bounded by
//   write_timeout) -> back to the loop through a queue and an eventfd: idle
//   (idle_timeout until the first byte of the next request) or closed.
//   A deadline that passes while reading: 408 (best effort) and close; a bad
//   request: 400/413/431/501/505 and close; past max_connections: 503 and
//   close. The wire format is in http_request_parser.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pdserve {

struct HttpHeader {
  std::string name;  // as sent
  std::string value;
};

struct HttpRequest {
  std::string method;  // "GET"
  std::string target;  // "/v1/models?x=1" as sent
  std::string path;    // "/v1/models" (target before '?')
  std::string query;   // "x=1"
  int http_minor = 1;  // HTTP/1.x
  std::vector<HttpHeader> headers;
  std::string body;          // the whole body (Content-Length or decoded chunked)
  std::string peer_address;  // numeric, "127.0.0.1" or "::1"
  int peer_port = 0;
  // The first header of that name, case-insensitive; nullptr if absent.
  const std::string* Header(absl::string_view name) const;
};

// Handed to the handler; writes the one response of a request. Not
// thread-safe; used by the handler's thread only.
class HttpResponseWriter {
 public:
  virtual ~HttpResponseWriter() = default;
  // A whole response with Content-Length. Returns false if the client is gone
  // or a write timed out. The framing headers are the server's: Connection,
  // Content-Length and Transfer-Encoding in extra_headers are not sent, but
  // "Connection: close" there closes the connection after the response.
  virtual bool Send(int status, absl::string_view content_type, absl::string_view body,
                    const std::vector<HttpHeader>& extra_headers = {}) = 0;
  // Starts a streamed response (Transfer-Encoding: chunked; HTTP/1.0: no
  // length, close at end).
  virtual bool StartStream(int status, absl::string_view content_type,
                           const std::vector<HttpHeader>& extra_headers = {}) = 0;
  // One piece of a streamed response, written to the socket before it returns
  // (no buffering of the whole). An empty piece writes nothing.
  virtual bool Write(absl::string_view data) = 0;
  // Ends the stream (the zero chunk).
  virtual bool EndStream() = 0;
  // The connection's socket, for poll()-ing the peer's FIN while the handler
  // waits (never read or write it directly).
  virtual int fd() const = 0;
};

// Runs on a pool thread, once per complete request; must answer through the
// writer before it returns (else the server answers 500). A stream not ended
// when it returns is cut: the connection closes. An exception it throws is
// logged, then the same rules apply.
using HttpHandler = std::function<void(const HttpRequest&, HttpResponseWriter&)>;

struct HttpServerOptions {
  std::string name = "http";  // names the server in log lines and errors
  std::string host = "127.0.0.1";
  int port = 0;                             // 0 picks one
  std::string tls_cert_file, tls_key_file;  // both set: HTTPS only (PEM files)
  int max_connections = 1024;  // open connections; past it a new one gets 503 and is closed at once
  // From accept (or the end of the previous response) to the end of the
  // headers: a hard deadline, not reset by each byte; includes the TLS
  // handshake.
  absl::Duration header_timeout = absl::Seconds(10);
  // From the end of the headers to the end of the body: hard deadline.
  absl::Duration body_timeout = absl::Seconds(30);
  // A keep-alive connection with no new request byte for this long is closed.
  absl::Duration idle_timeout = absl::Seconds(5);
  // One write blocked this long (client not reading) fails: the connection is
  // closed.
  absl::Duration write_timeout = absl::Seconds(10);
  size_t max_header_bytes = 64 << 10;  // request line + headers; past it 431
  size_t max_body_bytes = 8 << 20;     // past it 413 (checked on Content-Length before reading)
  int worker_threads = 32;             // handlers running at once
  // Requests for which this returns true run on a separate pool of
  // fast_worker_threads (cheap GETs: /v1/models, /health, /metrics), so they
  // answer even while every worker streams. Null: none. Called on the event
  // loop thread: must be cheap, must not block or throw.
  std::function<bool(const HttpRequest&)> fast_lane;
  int fast_worker_threads = 2;
  // Body of the server's own errors (400, 408, 413, 431, 503, 505...):
  // returns {content_type, body}. Null: text/plain message.
  std::function<std::pair<std::string, std::string>(int status, absl::string_view message)> error_body;
};

class HttpServer final {
 public:
  // Binds (InvalidArgument: bad options, TLS files that cannot be loaded;
  // Unavailable: cannot bind), starts the event-loop thread and the pools.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options, HttpHandler handler);
  // Stops accepting, closes every connection not in a handler, waits for
  // running handlers to return, joins all threads.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;

  struct Stats {
    int64_t open_connections = 0;
    int64_t accepted_total = 0;   // every accept, the refused ones included
    int64_t refused_total = 0;    // over max_connections
    int64_t timed_out_total = 0;  // header/body/idle deadline
    int64_t bad_requests_total = 0;
    int64_t requests_total = 0;
  };
  Stats stats() const;

 private:
  class Impl;  // http_server.cc
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pdserve
