// HttpServer (http_server.h): the event loop, the worker pools, the response
// writer and TLS.
//
// Ownership: every Conn lives in Impl::conns_. The loop thread alone touches
// a Conn while it is not in a handler (phases kHandshake, kReading,
// kLingering); once a request is complete the Conn leaves epoll and its
// timer and goes to a pool (kInHandler): from then on only that pool thread
// touches it, until it hands the Conn back through returned_ (a mutex and an
// eventfd). The destructor frees what is left after every thread is joined.
#include "common/net/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net/http_request_parser.h"
#include "common/util/log.h"

namespace pdserve {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRequestsPerConnection = 1000;
constexpr size_t kReadChunkBytes = 64 << 10;
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

Clock::duration ToClock(absl::Duration d) {
  return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
}

int MillisUntil(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// OpenSSL writes with write(2), without MSG_NOSIGNAL: a peer gone would kill
// the process with SIGPIPE. Every thread of the server blocks it, so the
// write fails with EPIPE instead (the signal stays pending on that thread).
void BlockSigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::string OpenSslErrors() {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

void PeerOf(const sockaddr_storage& addr, std::string* address, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    }
    *port = ntohs(a->sin6_port);
  }
  *address = buf;
}

// Reads and drops whatever the peer already sent (without blocking).
void DiscardPending(int fd) {
  char buf[4096];
  for (int i = 0; i < 64; ++i) {
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && errno == EINTR)) return;
  }
}

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

// Threads that run one Conn's handler at a time, in arrival order.
class WorkerPool final {
 public:
  void Start(int threads, std::function<void(Conn*)> run) {
    run_ = std::move(run);
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  void Push(Conn* c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(c);
    }
    cv_.notify_one();
  }
  // Lets the running handlers return, joins; returns the Conns never started.
  std::vector<Conn*> Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    return std::vector<Conn*>(queue_.begin(), queue_.end());
  }

 private:
  void Loop() {
    BlockSigpipe();
    while (true) {
      Conn* c = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        c = queue_.front();
        queue_.pop_front();
      }
      run_(c);
    }
  }

  std::function<void(Conn*)> run_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Conn*> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

bool AsksToClose(const std::vector<HttpHeader>& headers) {
  for (const HttpHeader& h : headers) {
    if (!absl::EqualsIgnoreCase(h.name, "connection")) continue;
    for (absl::string_view token : absl::StrSplit(h.value, ',')) {
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(token), "close")) return true;
    }
  }
  return false;
}

// The handler's writer: blocking writes on the non-blocking socket, each
// bounded by write_timeout without progress.
class ConnWriter final : public HttpResponseWriter {
 public:
  ConnWriter(Conn* conn, absl::Duration write_timeout, bool keep_alive)
      : conn_(conn), write_timeout_(ToClock(write_timeout)), keep_alive_(keep_alive),
        head_only_(conn->request.method == "HEAD") {}

  bool Send(int status, absl::string_view content_type, absl::string_view body,
            const std::vector<HttpHeader>& extra_headers) override {
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

  bool StartStream(int status, absl::string_view content_type,
                   const std::vector<HttpHeader>& extra_headers) override {
    if (state_ != State::kNone) return false;
    state_ = State::kStreaming;
    chunked_ = conn_->request.http_minor >= 1;
    keep_alive_ = keep_alive_ && chunked_ && !AsksToClose(extra_headers);
    return WriteAll(HttpResponseHead(status, content_type, -1, chunked_, keep_alive_, extra_headers));
  }

  bool Write(absl::string_view data) override {
    if (state_ != State::kStreaming || failed_) return false;
    if (data.empty() || head_only_) return true;
    if (!chunked_) return WriteAll(data);
    char size[24];
    const int n = snprintf(size, sizeof(size), "%zx\r\n", data.size());
    return WriteAll(absl::StrCat(absl::string_view(size, static_cast<size_t>(n)), data, "\r\n"));
  }

  bool EndStream() override {
    if (state_ != State::kStreaming || failed_) return false;
    state_ = State::kDone;
    if (!chunked_ || head_only_) return Finish(true);
    return Finish(WriteAll("0\r\n\r\n"));
  }

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
  absl::Status CheckOptions() const;
  absl::Status InitTls();
  absl::Status Bind();

  // The loop thread.
  void Run();
  int NextTimeoutMs() const;
  void OnAccept();
  void PauseAccepting(int err);
  void AddConn(int fd, const sockaddr_storage& addr);
  void OnConnEvent(Conn* c);
  void DoHandshake(Conn* c);
  void OnReadable(Conn* c);
  enum class ReadResult { kData, kAgain, kEof };
  ReadResult ReadSome(Conn* c);
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
  bool TryWriteNow(Conn* c, absl::string_view data);
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

absl::Status HttpServer::Impl::CheckOptions() const {
  const HttpServerOptions& o = options_;
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(o.name, ": invalid HTTP server options: ", what));
  };
  if (!handler_) return bad("no handler");
  if (o.port < 0 || o.port > 65535) return bad(absl::StrCat("port ", o.port));
  if (o.max_connections < 1) return bad("max_connections < 1");
  if (o.worker_threads < 1) return bad("worker_threads < 1");
  if (o.fast_lane && o.fast_worker_threads < 1) return bad("fast_worker_threads < 1 with a fast lane");
  if (o.header_timeout <= absl::ZeroDuration() || o.body_timeout <= absl::ZeroDuration() ||
      o.idle_timeout <= absl::ZeroDuration() || o.write_timeout <= absl::ZeroDuration()) {
    return bad("a timeout <= 0");
  }
  if (o.max_header_bytes < 16) return bad("max_header_bytes < 16");
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) return bad("tls_cert_file and tls_key_file go together");
  return absl::OkStatus();
}

absl::Status HttpServer::Impl::InitTls() {
  if (options_.tls_cert_file.empty()) return absl::OkStatus();
  ERR_clear_error();
  ssl_ctx_ = SSL_CTX_new(TLS_server_method());
  if (ssl_ctx_ == nullptr) return absl::InternalError(absl::StrCat(options_.name, ": SSL_CTX_new: ", OpenSslErrors()));
  SSL_CTX_set_min_proto_version(ssl_ctx_, TLS1_2_VERSION);
  SSL_CTX_set_options(ssl_ctx_, SSL_OP_NO_RENEGOTIATION);
  // Partial writes: WriteAll and TryWriteNow take what a record took. Released
  // buffers: an idle connection holds no 34 KiB of them.
  SSL_CTX_set_mode(ssl_ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                 SSL_MODE_RELEASE_BUFFERS);
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(options_.name, ": ", what, " (certificate ", options_.tls_cert_file,
                                                   ", key ", options_.tls_key_file, "): ", OpenSslErrors()));
  };
  if (SSL_CTX_use_certificate_chain_file(ssl_ctx_, options_.tls_cert_file.c_str()) != 1) {
    return bad("cannot load the TLS certificate");
  }
  if (SSL_CTX_use_PrivateKey_file(ssl_ctx_, options_.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return bad("cannot load the TLS private key");
  }
  if (SSL_CTX_check_private_key(ssl_ctx_) != 1) return bad("the TLS private key does not match the certificate");
  return absl::OkStatus();
}

absl::Status HttpServer::Impl::Bind() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  const int gai = getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(), port.c_str(), &hints, &found);
  const std::string where = absl::StrCat(options_.name, ": cannot listen on ", options_.host, ":", options_.port);
  if (gai != 0) return absl::UnavailableError(absl::StrCat(where, ": ", gai_strerror(gai)));
  int err = 0;
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      err = errno;
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) return absl::UnavailableError(absl::StrCat(where, ": ", strerror(err)));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string ignored;
  PeerOf(addr, &ignored, &port_);
  return absl::OkStatus();
}

absl::Status HttpServer::Impl::Init() {
  if (absl::Status s = CheckOptions(); !s.ok()) return s;
  if (absl::Status s = InitTls(); !s.ok()) return s;
  if (absl::Status s = Bind(); !s.ok()) return s;
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
      DiscardPending(fd);
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
  PeerOf(addr, &c->peer_address, &c->peer_port);
  c->head_deadline = Clock::now() + ToClock(options_.header_timeout);
  SetDeadline(c, c->head_deadline);
  if (ssl_ctx_ != nullptr) {
    c->ssl = SSL_new(ssl_ctx_);
    if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
      ERR_clear_error();
      CloseConn(c);
      return;
    }
    SSL_set_accept_state(c->ssl);
    c->phase = Conn::Phase::kHandshake;
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
  ERR_clear_error();
  const int r = SSL_do_handshake(c->ssl);
  if (r == 1) {
    c->phase = Conn::Phase::kReading;
    Arm(c, EPOLLIN);
    OnReadable(c);  // the first request may be in OpenSSL's buffer already
    return;
  }
  const int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ) {
    Arm(c, EPOLLIN);
  } else if (e == SSL_ERROR_WANT_WRITE) {
    Arm(c, EPOLLIN | EPOLLOUT);
  } else {
    ERR_clear_error();
    CloseConn(c);  // not TLS, or a failed handshake
  }
}

void HttpServer::Impl::OnReadable(Conn* c) {
  while (c->phase == Conn::Phase::kReading) {
    if (!c->in.empty() && !Advance(c)) return;
    const ReadResult r = ReadSome(c);
    if (r == ReadResult::kAgain) return;
    if (r == ReadResult::kEof) {
      CloseConn(c);  // the client is gone (or went before finishing its request)
      return;
    }
  }
}

HttpServer::Impl::ReadResult HttpServer::Impl::ReadSome(Conn* c) {
  if (c->ssl != nullptr) {
    ERR_clear_error();
    const int r = SSL_read(c->ssl, read_buf_.data(), static_cast<int>(read_buf_.size()));
    if (r > 0) {
      c->in.append(read_buf_.data(), static_cast<size_t>(r));
      Arm(c, EPOLLIN);
      return ReadResult::kData;
    }
    const int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      Arm(c, e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLIN | EPOLLOUT);
      return ReadResult::kAgain;
    }
    ERR_clear_error();
    return ReadResult::kEof;
  }
  while (true) {
    const ssize_t n = recv(c->fd, read_buf_.data(), read_buf_.size(), 0);
    if (n > 0) {
      c->in.append(read_buf_.data(), static_cast<size_t>(n));
      return ReadResult::kData;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadResult::kAgain;
    return ReadResult::kEof;
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
        if (c->parser.expects_continue() && c->in.empty() && !TryWriteNow(c, kContinue)) {
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
  TryWriteNow(c, ErrorResponse(status, message));
  Linger(c);
}

// Closes our side for writing and drains the peer's for a moment (see
// kLingerTime) before the close.
void HttpServer::Impl::Linger(Conn* c) {
  if (c->ssl != nullptr && SSL_is_init_finished(c->ssl)) {
    ERR_clear_error();
    SSL_shutdown(c->ssl);  // close_notify, best effort
    ERR_clear_error();
  }
  shutdown(c->fd, SHUT_WR);
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
        TryWriteNow(c, ErrorResponse(408, "request timed out"));
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

// Best effort from the loop: what the socket takes now; true if all of it.
bool HttpServer::Impl::TryWriteNow(Conn* c, absl::string_view data) {
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
  if (c->ssl != nullptr) SSL_free(c->ssl);
  c->ssl = nullptr;
  DiscardPending(c->fd);
  close(c->fd);
  c->fd = -1;
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
