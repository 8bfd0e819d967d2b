// One connection of HttpServer (http_connection.h): socket and TLS I/O, and
// ConnWriter, the handler's response writer with its poll-bounded writes.
#include "common/net/http_connection.h"

#include <openssl/err.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pdserve {
namespace http_internal {
namespace {

bool AsksToClose(const std::vector<HttpHeader>& headers) {
  for (const HttpHeader& h : headers) {
    if (!absl::EqualsIgnoreCase(h.name, "connection")) continue;
    for (absl::string_view token : absl::StrSplit(h.value, ',')) {
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(token), "close")) return true;
    }
  }
  return false;
}

}  // namespace

// ---- Socket and TLS I/O ----

bool StartTls(Conn* c, SSL_CTX* ctx) {
  c->ssl = SSL_new(ctx);
  if (c->ssl == nullptr || SSL_set_fd(c->ssl, c->fd) != 1) {
    ERR_clear_error();
    return false;
  }
  SSL_set_accept_state(c->ssl);
  c->phase = Conn::Phase::kHandshake;
  return true;
}

HandshakeResult HandshakeStep(Conn* c) {
  ERR_clear_error();
  const int r = SSL_do_handshake(c->ssl);
  if (r == 1) return HandshakeResult::kDone;
  const int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ) return HandshakeResult::kWantRead;
  if (e == SSL_ERROR_WANT_WRITE) return HandshakeResult::kWantWrite;
  ERR_clear_error();
  return HandshakeResult::kFailed;
}

ReadResult ReadSome(Conn* c, std::vector<char>* buf, uint32_t* arm) {
  *arm = 0;
  if (c->ssl != nullptr) {
    ERR_clear_error();
    const int r = SSL_read(c->ssl, buf->data(), static_cast<int>(buf->size()));
    if (r > 0) {
      c->in.append(buf->data(), static_cast<size_t>(r));
      *arm = EPOLLIN;
      return ReadResult::kData;
    }
    const int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      *arm = e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLIN | EPOLLOUT;
      return ReadResult::kAgain;
    }
    ERR_clear_error();
    return ReadResult::kEof;
  }
  while (true) {
    const ssize_t n = recv(c->fd, buf->data(), buf->size(), 0);
    if (n > 0) {
      c->in.append(buf->data(), static_cast<size_t>(n));
      return ReadResult::kData;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadResult::kAgain;
    return ReadResult::kEof;
  }
}

bool TryWriteNow(Conn* c, absl::string_view data) {
  if (c->ssl != nullptr) {
    if (!SSL_is_init_finished(c->ssl)) return false;
    ERR_clear_error();
    const int r = SSL_write(c->ssl, data.data(), static_cast<int>(data.size()));
    ERR_clear_error();
    return r == static_cast<int>(data.size());
  }
  while (!data.empty()) {
    const ssize_t n = send(c->fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void ShutdownWrite(Conn* c) {
  if (c->ssl != nullptr && SSL_is_init_finished(c->ssl)) {
    ERR_clear_error();
    SSL_shutdown(c->ssl);  // close_notify, best effort
    ERR_clear_error();
  }
  shutdown(c->fd, SHUT_WR);
}

void DiscardPending(int fd) {
  char buf[4096];
  for (int i = 0; i < 64; ++i) {
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && errno == EINTR)) return;
  }
}

void ReleaseSocket(Conn* c) {
  if (c->ssl != nullptr) SSL_free(c->ssl);
  c->ssl = nullptr;
  DiscardPending(c->fd);
  close(c->fd);
  c->fd = -1;
}

// ---- ConnWriter ----

ConnWriter::ConnWriter(Conn* conn, absl::Duration write_timeout, bool keep_alive)
    : conn_(conn), write_timeout_(ToClock(write_timeout)), keep_alive_(keep_alive),
      head_only_(conn->request.method == "HEAD") {}

bool ConnWriter::Send(int status, absl::string_view content_type, absl::string_view body,
                      const std::vector<HttpHeader>& extra_headers) {
  if (state_ != State::kNone) return false;
  state_ = State::kDone;
  keep_alive_ = keep_alive_ && !AsksToClose(extra_headers);
  const bool no_body = status == 204 || status == 304 || (status >= 100 && status < 200);
  std::string head = HttpResponseHead(status, content_type, no_body ? -1 : static_cast<int64_t>(body.size()),
                                      false, keep_alive_, extra_headers);
  if (no_body || head_only_) return Finish(WriteAll(head));
  if (body.size() <= kReadChunkBytes) return Finish(WriteAll(absl::StrCat(head, body)));
  return Finish(WriteAll(head) && WriteAll(body));
}

bool ConnWriter::StartStream(int status, absl::string_view content_type,
                             const std::vector<HttpHeader>& extra_headers) {
  if (state_ != State::kNone) return false;
  state_ = State::kStreaming;
  chunked_ = conn_->request.http_minor >= 1;
  keep_alive_ = keep_alive_ && chunked_ && !AsksToClose(extra_headers);
  return WriteAll(HttpResponseHead(status, content_type, -1, chunked_, keep_alive_, extra_headers));
}

bool ConnWriter::Write(absl::string_view data) {
  if (state_ != State::kStreaming || failed_) return false;
  if (data.empty() || head_only_) return true;
  if (!chunked_) return WriteAll(data);
  char size[24];
  const int n = snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return WriteAll(absl::StrCat(absl::string_view(size, static_cast<size_t>(n)), data, "\r\n"));
}

bool ConnWriter::EndStream() {
  if (state_ != State::kStreaming || failed_) return false;
  state_ = State::kDone;
  if (!chunked_ || head_only_) return Finish(true);
  return Finish(WriteAll("0\r\n\r\n"));
}

ssize_t ConnWriter::WriteOnce(absl::string_view data, short* wait_events) {
  *wait_events = POLLOUT;
  if (conn_->ssl != nullptr) {
    ERR_clear_error();
    const int r = SSL_write(conn_->ssl, data.data(), static_cast<int>(std::min<size_t>(data.size(), INT_MAX)));
    if (r > 0) return r;
    const int e = SSL_get_error(conn_->ssl, r);
    if (e == SSL_ERROR_WANT_WRITE) return 0;
    if (e == SSL_ERROR_WANT_READ) {
      *wait_events = POLLIN;
      return 0;
    }
    ERR_clear_error();
    return -1;
  }
  while (true) {
    const ssize_t n = send(conn_->fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  }
}

bool ConnWriter::WriteAll(absl::string_view data) {
  if (failed_) return false;
  Clock::time_point deadline = Clock::now() + write_timeout_;
  while (!data.empty()) {
    short wait_events = POLLOUT;
    const ssize_t n = WriteOnce(data, &wait_events);
    if (n < 0) break;
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      deadline = Clock::now() + write_timeout_;
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    pollfd p{conn_->fd, wait_events, 0};
    if (poll(&p, 1, MillisUntil(deadline, now)) < 0 && errno != EINTR) break;
    if ((p.revents & (POLLERR | POLLNVAL)) != 0) break;
  }
  failed_ = !data.empty();
  return !failed_;
}

}  // namespace http_internal
}  // namespace pdserve
