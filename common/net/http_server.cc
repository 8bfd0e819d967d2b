// HttpServer (http_server.h): the event loop (accept, reading requests, the
// deadlines, lingering closes), running handlers on the worker pools and the
// public class. Elsewhere: one connection's state, its socket and TLS I/O and
// the handler's writer (http_connection.h); the options checks, the TLS
// context and the listening socket (http_listener.h); the pool threads
// (http_worker_pool.h).
//
// Ownership: every Conn lives in Impl::conns_. The loop thread alone touches
// a Conn while it is not in a handler (phases kHandshake, kReading,
// kLingering); once a request is complete the Conn leaves epoll and its
// timer and goes to a pool (kInHandler): from then on only that pool thread
// touches it, until it hands the Conn back through returned_ (a mutex and an
// eventfd). The destructor frees what is left after every thread is joined.
#include "common/net/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/net/http_connection.h"
#include "common/net/http_listener.h"
#include "common/net/http_request_parser.h"
#include "common/net/http_worker_pool.h"
#include "common/util/log.h"

namespace pdserve {
namespace {

using http_internal::BlockSigpipe;
using http_internal::Clock;
using http_internal::Conn;
using http_internal::ConnWriter;
using http_internal::HandshakeResult;
using http_internal::kReadChunkBytes;
using http_internal::MillisUntil;
using http_internal::ReadResult;
using http_internal::ToClock;
using http_internal::WorkerPool;

constexpr int kMaxRequestsPerConnection = 1000;
// After an error response or a closing response: how long (and how much) the
// loop keeps reading and discarding before the close, so that the client's
// unread request bytes do not turn the close into a reset that destroys the
// response before the client reads it.
constexpr Clock::duration kLingerTime = std::chrono::seconds(1);
constexpr size_t kMaxLingerBytes = 1 << 20;
// accept4 out of descriptors (EMFILE...): accepting pauses this long.
constexpr Clock::duration kAcceptPause = std::chrono::milliseconds(100);
constexpr absl::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// The two descriptors in epoll that are not connections.
char kListenTag;
char kWakeTag;

}  // namespace

class HttpServer::Impl {
 public:
  Impl(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)), read_buf_(kReadChunkBytes) {}
  ~Impl();

  absl::Status Init();
  void StartThreads();
  int port() const { return port_; }
  Stats stats() const;

 private:
  absl::Status InitEpoll();

  // The loop thread.
  void Run();
  int NextTimeoutMs() const;
  void OnAccept();
  void PauseAccepting(int err);
  void AddConn(int fd, const sockaddr_storage& addr);
  void OnConnEvent(Conn* c);
  void DoHandshake(Conn* c);
  void OnReadable(Conn* c);
  bool Advance(Conn* c);
  void Dispatch(Conn* c);
  void FailRequest(Conn* c, int status, absl::string_view message);
  void Linger(Conn* c);
  void OnLingerReadable(Conn* c);
  void ProcessReturned();
  void Resume(Conn* c);
  void ExpireTimers();
  void OnDeadline(Conn* c);
  void SetDeadline(Conn* c, Clock::time_point t);
  void ClearDeadline(Conn* c);
  void Arm(Conn* c, uint32_t events);
  std::pair<std::string, std::string> ErrorBody(int status, absl::string_view message) const;
  std::string ErrorResponse(int status, absl::string_view message) const;
  void CloseConn(Conn* c);
  void FreeConn(Conn* c);

  // The pool threads.
  void RunHandler(Conn* c);
  // What the loop does with a connection back from its handler.
  enum class After { kKeep, kLinger, kClose };
  void Return(Conn* c, After after);
  void Wake();

  const HttpServerOptions options_;
  const HttpHandler handler_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  SSL_CTX* ssl_ctx_ = nullptr;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread loop_thread_;
  WorkerPool pool_;
  WorkerPool fast_pool_;

  // The loop thread's (and the destructor's once every thread is joined).
  std::unordered_map<Conn*, std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> graveyard_;  // closed this round; freed after its events
  std::set<std::pair<Clock::time_point, Conn*>> timers_;
  std::vector<char> read_buf_;
  bool accept_paused_ = false;
  Clock::time_point accept_resume_;
  Clock::time_point last_accept_error_log_;

  std::mutex returned_mu_;
  std::vector<std::pair<Conn*, After>> returned_;  // handled

  std::atomic<int64_t> open_{0}, accepted_{0}, refused_{0}, timed_out_{0}, bad_requests_{0}, requests_{0};
};

// ---- Start and stop ----

absl::Status HttpServer::Impl::Init() {
  if (absl::Status s = http_internal::CheckHttpServerOptions(options_, static_cast<bool>(handler_)); !s.ok()) {
    return s;
  }
  absl::StatusOr<SSL_CTX*> ctx = http_internal::NewServerTlsContext(options_);
  if (!ctx.ok()) return ctx.status();
  ssl_ctx_ = *ctx;
  absl::StatusOr<int> listen_fd = http_internal::BindListener(options_, &port_);
  if (!listen_fd.ok()) return listen_fd.status();
  listen_fd_ = *listen_fd;
  return InitEpoll();
}

absl::Status HttpServer::Impl::InitEpoll() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat(options_.name, ": epoll/eventfd: ", strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.ptr = &kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return absl::OkStatus();
}

void HttpServer::Impl::StartThreads() {
  pool_.Start(options_.worker_threads, [this](Conn* c) { RunHandler(c); });
  if (options_.fast_lane) fast_pool_.Start(options_.fast_worker_threads, [this](Conn* c) { RunHandler(c); });
  loop_thread_ = std::thread([this] { Run(); });
}

HttpServer::Impl::~Impl() {
  stop_.store(true);
  if (loop_thread_.joinable()) {
    Wake();
    loop_thread_.join();  // it closed every connection it held
  }
  pool_.Stop();  // waits for the running handlers; the queued ones are in conns_
  fast_pool_.Stop();
  // Every thread is gone: what is left (queued, handled, returned) is ours.
  for (auto& [ptr, conn] : conns_) FreeConn(conn.get());
  conns_.clear();
  graveyard_.clear();
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) close(fd);
  }
  if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
}

HttpServer::Stats HttpServer::Impl::stats() const {
  Stats s;
  s.open_connections = open_.load();
  s.accepted_total = accepted_.load();
  s.refused_total = refused_.load();
  s.timed_out_total = timed_out_.load();
  s.bad_requests_total = bad_requests_.load();
  s.requests_total = requests_.load();
  return s;
}

// ---- The loop ----

void HttpServer::Impl::Run() {
  BlockSigpipe();
  std::vector<epoll_event> events(256);
  while (!stop_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), NextTimeoutMs());
    if (n < 0 && errno != EINTR) {
      log::Error(absl::StrCat(options_.name, ": epoll_wait: ", strerror(errno)));
      break;
    }
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &kListenTag) {
        OnAccept();
      } else if (tag == &kWakeTag) {
        ProcessReturned();
      } else {
        OnConnEvent(static_cast<Conn*>(tag));
      }
    }
    ExpireTimers();
    if (accept_paused_ && Clock::now() >= accept_resume_) {
      accept_paused_ = false;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = &kListenTag;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    }
    graveyard_.clear();
  }
  // Stop accepting; close every connection not in a handler.
  close(listen_fd_);
  listen_fd_ = -1;
  std::vector<Conn*> held;
  for (auto& [ptr, conn] : conns_) {
    if (conn->phase != Conn::Phase::kInHandler) held.push_back(ptr);
  }
  for (Conn* c : held) CloseConn(c);
  graveyard_.clear();
}

int HttpServer::Impl::NextTimeoutMs() const {
  const Clock::time_point now = Clock::now();
  int ms = -1;
  if (!timers_.empty()) ms = MillisUntil(timers_.begin()->first, now);
  if (accept_paused_) {
    const int resume = MillisUntil(accept_resume_, now);
    ms = ms < 0 ? resume : std::min(ms, resume);
  }
  return ms;
}

void HttpServer::Impl::OnAccept() {
  for (int i = 0; i < 256 && !accept_paused_; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) PauseAccepting(errno);
      return;
    }
    accepted_.fetch_add(1);
    if (static_cast<int64_t>(conns_.size()) >= options_.max_connections) {
      refused_.fetch_add(1);
      if (ssl_ctx_ == nullptr) {
        const std::string r = ErrorResponse(503, "too many connections");
        (void)!send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR);
      }
      http_internal::DiscardPending(fd);
      close(fd);
      continue;
    }
    AddConn(fd, addr);
  }
}

// Out of descriptors or memory: stop polling the listening socket for a
// moment (it would stay readable and spin the loop); log at most once a
// second.
void HttpServer::Impl::PauseAccepting(int err) {
  const Clock::time_point now = Clock::now();
  if (now - last_accept_error_log_ >= std::chrono::seconds(1)) {
    last_accept_error_log_ = now;
    log::Error(absl::StrCat(options_.name, ": accept: ", strerror(err), " (accepting paused briefly)"));
  }
  accept_paused_ = true;
  accept_resume_ = now + kAcceptPause;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
}

void HttpServer::Impl::AddConn(int fd, const sockaddr_storage& addr) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto owned = std::make_unique<Conn>(fd, options_.max_header_bytes, options_.max_body_bytes);
  Conn* c = owned.get();
  conns_.emplace(c, std::move(owned));
  open_.fetch_add(1);
  http_internal::PeerOf(addr, &c->peer_address, &c->peer_port);
  c->head_deadline = Clock::now() + ToClock(options_.header_timeout);
  SetDeadline(c, c->head_deadline);
  if (ssl_ctx_ != nullptr && !http_internal::StartTls(c, ssl_ctx_)) {
    CloseConn(c);
    return;
  }
  Arm(c, EPOLLIN);
}

void HttpServer::Impl::OnConnEvent(Conn* c) {
  switch (c->phase) {
    case Conn::Phase::kHandshake:
      DoHandshake(c);
      break;
    case Conn::Phase::kReading:
      OnReadable(c);
      break;
    case Conn::Phase::kLingering:
      OnLingerReadable(c);
      break;
    default:
      break;  // closed earlier in this round, or (never) in a handler
  }
}

void HttpServer::Impl::DoHandshake(Conn* c) {
  switch (http_internal::HandshakeStep(c)) {
    case HandshakeResult::kDone:
      c->phase = Conn::Phase::kReading;
      Arm(c, EPOLLIN);
      OnReadable(c);  // the first request may be in OpenSSL's buffer already
      return;
    case HandshakeResult::kWantRead:
      Arm(c, EPOLLIN);
      return;
    case HandshakeResult::kWantWrite:
      Arm(c, EPOLLIN | EPOLLOUT);
      return;
    case HandshakeResult::kFailed:
      CloseConn(c);  // not TLS, or a failed handshake
      return;
  }
}

void HttpServer::Impl::OnReadable(Conn* c) {
  while (c->phase == Conn::Phase::kReading) {
    if (!c->in.empty() && !Advance(c)) return;
    uint32_t arm = 0;
    const ReadResult r = http_internal::ReadSome(c, &read_buf_, &arm);
    if (arm != 0) Arm(c, arm);
    if (r == ReadResult::kAgain) return;
    if (r == ReadResult::kEof) {
      CloseConn(c);  // the client is gone (or went before finishing its request)
      return;
    }
  }
}

// Parses c->in. True: more bytes are needed; false: the connection left the
// reading phase (its request went to a pool, or it failed and lingers).
bool HttpServer::Impl::Advance(Conn* c) {
  if (!c->started) {
    c->started = true;
    if (c->reused) SetDeadline(c, c->head_deadline);  // the idle wait is over
  }
  while (true) {
    size_t used = 0;
    const HttpRequestParser::Progress p = c->parser.Parse(c->in, &used);
    c->in.erase(0, used);
    switch (p) {
      case HttpRequestParser::Progress::kNeedMore:
        return true;
      case HttpRequestParser::Progress::kHeadDone:
        SetDeadline(c, Clock::now() + ToClock(options_.body_timeout));
        if (c->parser.expects_continue() && c->in.empty() && !http_internal::TryWriteNow(c, kContinue)) {
          CloseConn(c);
          return false;
        }
        continue;
      case HttpRequestParser::Progress::kComplete:
        Dispatch(c);
        return false;
      case HttpRequestParser::Progress::kError:
        FailRequest(c, c->parser.error_status(), c->parser.error_message());
        return false;
    }
  }
}

void HttpServer::Impl::Dispatch(Conn* c) {
  Arm(c, 0);
  ClearDeadline(c);
  c->phase = Conn::Phase::kInHandler;
  c->request = std::move(c->parser.request());
  c->request.peer_address = c->peer_address;
  c->request.peer_port = c->peer_port;
  ++c->requests;
  c->keep_alive = c->parser.keep_alive() && c->requests < kMaxRequestsPerConnection;
  requests_.fetch_add(1);
  if (options_.fast_lane && options_.fast_lane(c->request)) {
    fast_pool_.Push(c);
  } else {
    pool_.Push(c);
  }
}

void HttpServer::Impl::FailRequest(Conn* c, int status, absl::string_view message) {
  bad_requests_.fetch_add(1);
  http_internal::TryWriteNow(c, ErrorResponse(status, message));
  Linger(c);
}

// Closes our side for writing and drains the peer's for a moment (see
// kLingerTime) before the close.
void HttpServer::Impl::Linger(Conn* c) {
  http_internal::ShutdownWrite(c);
  c->phase = Conn::Phase::kLingering;
  c->in.clear();
  c->lingered = 0;
  SetDeadline(c, Clock::now() + kLingerTime);
  Arm(c, EPOLLIN);
}

void HttpServer::Impl::OnLingerReadable(Conn* c) {
  while (true) {
    const ssize_t n = recv(c->fd, read_buf_.data(), read_buf_.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0 || (c->lingered += static_cast<size_t>(n)) > kMaxLingerBytes) break;
  }
  CloseConn(c);
}

void HttpServer::Impl::ProcessReturned() {
  uint64_t ignored = 0;
  (void)!read(wake_fd_, &ignored, sizeof(ignored));
  std::vector<std::pair<Conn*, After>> batch;
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    batch.swap(returned_);
  }
  for (auto [c, after] : batch) {
    if (stop_.load() || after == After::kClose) {
      CloseConn(c);
    } else if (after == After::kKeep) {
      Resume(c);
    } else {
      Linger(c);  // a response that closes: its bytes reach the client before the close
    }
  }
}

// A response is done and the connection stays: idle until the next request's
// first byte (idle_timeout), its head by header_timeout from now.
void HttpServer::Impl::Resume(Conn* c) {
  c->phase = Conn::Phase::kReading;
  c->parser.Reset();
  c->started = false;
  c->reused = true;
  const Clock::time_point now = Clock::now();
  c->head_deadline = now + ToClock(options_.header_timeout);
  SetDeadline(c, std::min(now + ToClock(options_.idle_timeout), c->head_deadline));
  Arm(c, EPOLLIN);
  OnReadable(c);  // pipelined bytes already read, or in OpenSSL's buffer
}

void HttpServer::Impl::ExpireTimers() {
  const Clock::time_point now = Clock::now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    Conn* c = timers_.begin()->second;
    timers_.erase(timers_.begin());
    c->has_deadline = false;
    OnDeadline(c);
  }
}

void HttpServer::Impl::OnDeadline(Conn* c) {
  switch (c->phase) {
    case Conn::Phase::kReading:
      timed_out_.fetch_add(1);
      // A keep-alive connection that sent nothing of a next request just
      // closes; otherwise the client hears why.
      if (c->started || !c->reused) {
        http_internal::TryWriteNow(c, ErrorResponse(408, "request timed out"));
        Linger(c);
        return;
      }
      CloseConn(c);
      return;
    case Conn::Phase::kHandshake:
      timed_out_.fetch_add(1);
      CloseConn(c);
      return;
    default:
      CloseConn(c);  // lingered long enough
      return;
  }
}

void HttpServer::Impl::SetDeadline(Conn* c, Clock::time_point t) {
  ClearDeadline(c);
  c->has_deadline = true;
  c->deadline = t;
  timers_.emplace(t, c);
}

void HttpServer::Impl::ClearDeadline(Conn* c) {
  if (!c->has_deadline) return;
  timers_.erase({c->deadline, c});
  c->has_deadline = false;
}

void HttpServer::Impl::Arm(Conn* c, uint32_t events) {
  if (c->armed == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = c;
  const int op = c->armed == 0 ? EPOLL_CTL_ADD : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
  if (epoll_ctl(epoll_fd_, op, c->fd, &ev) != 0) {
    log::Error(absl::StrCat(options_.name, ": epoll_ctl: ", strerror(errno)));
  }
  c->armed = events;
}

std::pair<std::string, std::string> HttpServer::Impl::ErrorBody(int status, absl::string_view message) const {
  if (options_.error_body) return options_.error_body(status, message);
  return {"text/plain; charset=utf-8", absl::StrCat(message, "\n")};
}

std::string HttpServer::Impl::ErrorResponse(int status, absl::string_view message) const {
  const auto [content_type, body] = ErrorBody(status, message);
  return HttpErrorResponse(status, content_type, body);
}

// The loop's close (or the destructor's at the end): out of epoll and the
// timers, freed after this round's events.
void HttpServer::Impl::CloseConn(Conn* c) {
  if (c->phase == Conn::Phase::kClosed) return;
  Arm(c, 0);
  ClearDeadline(c);
  FreeConn(c);
  auto it = conns_.find(c);
  if (it != conns_.end()) {
    graveyard_.push_back(std::move(it->second));
    conns_.erase(it);
  }
}

void HttpServer::Impl::FreeConn(Conn* c) {
  if (c->phase == Conn::Phase::kClosed) return;
  c->phase = Conn::Phase::kClosed;
  http_internal::ReleaseSocket(c);
  open_.fetch_sub(1);
}

// ---- The pools ----

void HttpServer::Impl::RunHandler(Conn* c) {
  ConnWriter writer(c, options_.write_timeout, c->keep_alive);
  try {
    handler_(c->request, writer);
  } catch (const std::exception& e) {
    log::Error(absl::StrCat(options_.name, ": handler of ", c->request.method, " ", c->request.path,
                            " threw: ", e.what()));
  } catch (...) {
    log::Error(absl::StrCat(options_.name, ": handler of ", c->request.method, " ", c->request.path, " threw"));
  }
  if (!writer.started()) {
    const auto [content_type, body] = ErrorBody(500, "the handler sent no response");
    writer.Send(500, content_type, body, {});
  }
  After after = After::kLinger;
  if (writer.failed()) {
    after = After::kClose;
  } else if (writer.complete() && writer.keep_alive() && !stop_.load()) {
    after = After::kKeep;
  }
  c->request = HttpRequest();
  Return(c, after);
}

void HttpServer::Impl::Return(Conn* c, After after) {
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    returned_.emplace_back(c, after);
  }
  Wake();
}

void HttpServer::Impl::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

// ---- HttpServer ----

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options, HttpHandler handler) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  impl->StartThreads();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;
int HttpServer::port() const { return impl_->port(); }
HttpServer::Stats HttpServer::stats() const { return impl_->stats(); }

}  // namespace pdserve
