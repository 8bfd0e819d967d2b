// One connection of HttpServer (http_server.h): its state, its socket and TLS
// I/O, and the handler's response writer. Internal to the server
// (http_server.cc, http_listener.cc); other code uses http_server.h.
//
// Contents:
//   Clock, ToClock, MillisUntil - the server's clock and its conversions.
//   kReadChunkBytes             - the size of one read (and of a response
//                                 written in one piece).
//   Conn                        - one connection: its phase, parser, pending
//                                 bytes, request, deadlines, epoll state.
//   Socket and TLS I/O (non-blocking, for the loop):
//     StartTls                  - attaches an SSL in accept state.
//     HandshakeStep             - one step of the TLS handshake.
//     ReadSome                  - one read into Conn::in.
//     TryWriteNow               - what the socket takes now (best effort).
//     ShutdownWrite             - close_notify (TLS) and SHUT_WR.
//     DiscardPending            - drops what the peer already sent.
//     ReleaseSocket             - frees the SSL, closes the descriptor.
//   ConnWriter                  - the HttpResponseWriter of a handler: blocking
//                                 writes on the non-blocking socket, each one
//                                 bounded by write_timeout through poll().
//
// Ownership (http_server.cc): every Conn lives in HttpServer::Impl's table.
// The loop thread alone touches a Conn while it is not in a handler (phases
// kHandshake, kReading, kLingering); once a request is complete the Conn
// leaves epoll and its timer and goes to a pool (kInHandler): from then on
// only that pool thread touches it (through a ConnWriter), until it hands the
// Conn back to the loop.
#pragma once

#include <openssl/ssl.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/net/http_request_parser.h"
#include "common/net/http_server.h"

namespace pdserve {
namespace http_internal {

using Clock = std::chrono::steady_clock;

inline Clock::duration ToClock(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

// Milliseconds from now to t for poll()/epoll_wait(): 0 if past, rounded up.
inline int MillisUntil(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

inline constexpr size_t kReadChunkBytes = 64 << 10;

struct Conn {
  enum class Phase { kHandshake, kReading, kInHandler, kLingering, kClosed };

  Conn(int fd, size_t max_header_bytes, size_t max_body_bytes) : fd(fd), parser(max_header_bytes, max_body_bytes) {}

  int fd;
  SSL* ssl = nullptr;
  Phase phase = Phase::kReading;
  HttpRequestParser parser;
  std::string in;        // read, not parsed yet (a partial or pipelined request)
  HttpRequest request;   // the request in its handler
  bool keep_alive = false;  // the response to `request` may keep the connection
  std::string peer_address;
  int peer_port = 0;
  bool started = false;  // a byte of the current request has arrived
  bool reused = false;   // a response was written on this connection already
  int requests = 0;
  Clock::time_point head_deadline;
  bool has_deadline = false;
  Clock::time_point deadline;
  uint32_t armed = 0;  // the epoll events registered; 0: not in epoll
  size_t lingered = 0;
};

// ---- Socket and TLS I/O ----

// Attaches a new SSL of ctx to c (server side) and enters kHandshake. False
// (OpenSSL's error queue cleared): the connection cannot be served.
bool StartTls(Conn* c, SSL_CTX* ctx);

enum class HandshakeResult { kDone, kWantRead, kWantWrite, kFailed };
// One non-blocking step of c's TLS handshake. kFailed: not TLS, or a failed
// handshake (OpenSSL's error queue cleared).
HandshakeResult HandshakeStep(Conn* c);

enum class ReadResult { kData, kAgain, kEof };
// One non-blocking read, through buf, appended to c->in. *arm: the epoll
// events the connection should wait for next (TLS may want EPOLLOUT to read),
// 0 to leave them as they are.
ReadResult ReadSome(Conn* c, std::vector<char>* buf, uint32_t* arm);

// Best effort from the loop: what the socket takes now; true if all of it.
// With TLS, false before the handshake is done.
bool TryWriteNow(Conn* c, absl::string_view data);

// Our side is done writing: close_notify if TLS is up (best effort), then
// shutdown(SHUT_WR).
void ShutdownWrite(Conn* c);

// Reads and drops whatever the peer already sent (without blocking).
void DiscardPending(int fd);

// Frees c's SSL, drains what the peer sent (so that the close is not a reset
// that destroys a response in flight) and closes c->fd (-1 after).
void ReleaseSocket(Conn* c);

// ---- The handler's writer ----

// The handler's writer: blocking writes on the non-blocking socket, each
// bounded by write_timeout without progress.
class ConnWriter final : public HttpResponseWriter {
 public:
  ConnWriter(Conn* conn, absl::Duration write_timeout, bool keep_alive);

  bool Send(int status, absl::string_view content_type, absl::string_view body,
            const std::vector<HttpHeader>& extra_headers) override;
  bool StartStream(int status, absl::string_view content_type,
                   const std::vector<HttpHeader>& extra_headers) override;
  bool Write(absl::string_view data) override;
  bool EndStream() override;
  int fd() const override { return conn_->fd; }

  bool started() const { return state_ != State::kNone; }
  // The whole response went out: the connection may carry another.
  bool complete() const { return state_ == State::kDone && complete_ && !failed_; }
  bool keep_alive() const { return keep_alive_; }
  // A write failed (client gone, or not reading for write_timeout).
  bool failed() const { return failed_; }

 private:
  enum class State { kNone, kStreaming, kDone };

  bool Finish(bool ok) {
    complete_ = ok;
    return ok;
  }
  bool WriteAll(absl::string_view data);
  // One write attempt: bytes written, 0 to wait for *wait_events, -1 failed.
  ssize_t WriteOnce(absl::string_view data, short* wait_events);

  Conn* const conn_;
  const Clock::duration write_timeout_;
  bool keep_alive_;
  const bool head_only_;
  State state_ = State::kNone;
  bool chunked_ = false;
  bool failed_ = false;
  bool complete_ = false;
};

}  // namespace http_internal
}  // namespace pdserve
