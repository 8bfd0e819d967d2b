// common/net/http_server: the event-driven HTTP/1.1 server on real sockets
// (127.0.0.1, port 0): requests and responses (Content-Length, chunked both
// ways, 100-continue, keep-alive, pipelining, HTTP/1.0), the server's own
// errors (400, 413, 431, 501, 505, 500), the hard deadlines (header, body,
// idle), the connection cap, slow clients that must not hold the workers,
// the fast lane, TLS, and the request parser on its own.
#include "common/net/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/net/http_request_parser.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

// The clients below write to sockets the server may have closed.
const bool kSigpipeIgnored = (signal(SIGPIPE, SIG_IGN), true);

// ---- A small blocking test client ----

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// Decodes a chunked body from `in`; false until it is whole.
bool DecodeChunked(absl::string_view in, std::string* body, size_t* used) {
  size_t pos = 0;
  body->clear();
  while (true) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == absl::string_view::npos) return false;
    size_t size = 0;
    if (!absl::SimpleHexAtoi(in.substr(pos, eol - pos), &size)) return false;
    pos = eol + 2;
    if (size == 0) {
      if (in.substr(pos, 2) != "\r\n") return false;
      *used = pos + 2;
      return true;
    }
    if (in.size() < pos + size + 2) return false;
    body->append(in.data() + pos, size);
    pos += size + 2;
  }
}

// One response from the start of `in` (eof: the server closed, so a body
// without a length ends here). *used: its length.
bool ParseResponse(absl::string_view in, bool eof, Response* r, size_t* used) {
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == absl::string_view::npos) return false;
  std::vector<absl::string_view> lines = absl::StrSplit(in.substr(0, head_end), "\r\n");
  if (lines.empty() || !absl::StartsWith(lines[0], "HTTP/1.1 ") || lines[0].size() < 12 ||
      !absl::SimpleAtoi(lines[0].substr(9, 3), &r->status)) {
    return false;
  }
  r->headers.clear();
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    r->headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  const absl::string_view rest = in.substr(head_end + 4);
  if (r->status == 100) {
    r->body.clear();
    *used = head_end + 4;
    return true;
  }
  if (r->headers.count("content-length")) {
    size_t n = 0;
    if (!absl::SimpleAtoi(r->headers["content-length"], &n) || rest.size() < n) return false;
    r->body = std::string(rest.substr(0, n));
    *used = head_end + 4 + n;
    return true;
  }
  if (r->Header("transfer-encoding") == "chunked") {
    size_t n = 0;
    if (!DecodeChunked(rest, &r->body, &n)) return false;
    *used = head_end + 4 + n;
    return true;
  }
  if (!eof) return false;
  r->body = std::string(rest);
  *used = in.size();
  return true;
}

class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Client() { Close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int local_port() const {
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  bool Send(absl::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Waits up to `timeout` for bytes and appends them; false at EOF, error or
  // timeout (eof() tells which).
  bool ReadSome(absl::Duration timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) return false;
    char buf[16384];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(buf, static_cast<size_t>(n));
    return true;
  }

  // The next response, or nullopt if none whole came within `timeout`.
  std::optional<Response> Read(absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      Response r;
      size_t used = 0;
      if (ParseResponse(buf_, eof_, &r, &used)) {
        buf_.erase(0, used);
        return r;
      }
      if (eof_ || absl::Now() >= deadline) return std::nullopt;
      ReadSome(deadline - absl::Now());
    }
  }

  // Reads to EOF (or a reset); false if the connection stayed open `timeout`.
  bool WaitClosed(absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!eof_ && absl::Now() < deadline) ReadSome(deadline - absl::Now());
    return eof_;
  }

  std::string& buffer() { return buf_; }

 private:
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
};

// One request on a new connection.
std::optional<Response> RoundTrip(int port, absl::string_view request) {
  Client c(port);
  if (!c.ok() || !c.Send(request)) return std::nullopt;
  return c.Read();
}

// Polls `pred` (a condition, not a pause) until true or `timeout`.
bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A gate the handlers wait on.
class Latch {
 public:
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool Wait(absl::Duration timeout = absl::Seconds(20)) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, absl::ToChronoMilliseconds(timeout), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Answers "<method> <path> <query> <body>", with X-Peer.
void Echo(const HttpRequest& req, HttpResponseWriter& w) {
  const std::string* tag = req.Header("x-tag");
  w.Send(200, "text/plain", absl::StrCat(req.method, " ", req.path, " ", req.query, " ", req.body),
         {{"X-Peer", absl::StrCat(req.peer_address, ":", req.peer_port)}, {"X-Tag", tag ? *tag : ""}});
}

std::unique_ptr<HttpServer> StartOrDie(HttpServerOptions options, HttpHandler handler = Echo) {
  absl::StatusOr<std::unique_ptr<HttpServer>> s = HttpServer::Start(std::move(options), std::move(handler));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// ---- Requests and responses ----

TEST(HttpServerTest, GetAndPostWithContentLength) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c.Send("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-TAG:  hello \r\n\r\n"));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /v1/models x=1 ");
  EXPECT_EQ(r->Header("x-tag"), "hello");
  EXPECT_EQ(r->Header("content-type"), "text/plain");
  EXPECT_EQ(r->Header("connection"), "keep-alive");
  EXPECT_EQ(r->Header("x-peer"), absl::StrCat("127.0.0.1:", c.local_port()));
  ASSERT_TRUE(c.Send("POST /v1/chat HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world"));
  r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "POST /v1/chat  hello world");
  EXPECT_EQ(server->stats().requests_total, 2);
}

TEST(HttpServerTest, ChunkedRequestBodyIsDecoded) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  std::optional<Response> r = RoundTrip(server->port(),
                                        "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "POST /c  hello world");
}

TEST(HttpServerTest, ExpectContinueGets100BeforeTheBody) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 100);
  ASSERT_TRUE(c.Send("body"));
  r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "POST /e  body");
}

TEST(HttpServerTest, KeepAliveAndPipelinedRequests) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.Send(absl::StrCat("GET /k", i, " HTTP/1.1\r\n\r\n")));
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->body, absl::StrCat("GET /k", i, "  "));
  }
  // Three at once, one of them with a body, the last split mid-head.
  ASSERT_TRUE(c.Send("GET /p0 HTTP/1.1\r\n\r\nPOST /p1 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /p2 HT"));
  ASSERT_TRUE(c.Send("TP/1.1\r\n\r\n"));
  const char* want[] = {"GET /p0  ", "POST /p1  abc", "GET /p2  "};
  for (const char* w : want) {
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r.has_value()) << w;
    EXPECT_EQ(r->body, w);
  }
  EXPECT_EQ(server->stats().accepted_total, 1);
}

TEST(HttpServerTest, ConnectionCloseIsHonoured) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("GET /c HTTP/1.1\r\nConnection: close\r\n\r\n"));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_TRUE(c.WaitClosed());
}

TEST(HttpServerTest, Http10ClosesUnlessKeepAlive) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("GET /old HTTP/1.0\r\n\r\n"));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "GET /old  ");
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_TRUE(c.WaitClosed());

  Client k(server->port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(k.Send("GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    r = k.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->Header("connection"), "keep-alive");
  }
}

TEST(HttpServerTest, HeadGetsNoBody) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("HEAD /h HTTP/1.1\r\n\r\nGET /g HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(WaitFor([&] {
    c.ReadSome(absl::Milliseconds(50));
    return absl::StrContains(c.buffer(), "GET /g  ");
  }));
  // The HEAD answer carries the GET-sized length but no body: the next
  // response starts right after its head.
  const std::string& b = c.buffer();
  const size_t first_end = b.find("\r\n\r\n") + 4;
  EXPECT_TRUE(absl::StartsWith(b.substr(first_end), "HTTP/1.1 200 OK\r\n")) << b;
}

TEST(HttpServerTest, StreamedResponseIsChunked) {
  auto server = StartOrDie({}, [](const HttpRequest& req, HttpResponseWriter& w) {
    ASSERT_TRUE(w.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
    for (const char* piece : {"data: a\n\n", "", "data: bb\n\n", "data: [DONE]\n\n"}) ASSERT_TRUE(w.Write(piece));
    ASSERT_TRUE(w.EndStream());
  });
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  for (int i = 0; i < 2; ++i) {  // the connection stays usable after a stream
    ASSERT_TRUE(c.Send("GET /s HTTP/1.1\r\n\r\n"));
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->Header("transfer-encoding"), "chunked");
    EXPECT_EQ(r->Header("content-type"), "text/event-stream");
    EXPECT_EQ(r->Header("cache-control"), "no-cache");
    EXPECT_EQ(r->body, "data: a\n\ndata: bb\n\ndata: [DONE]\n\n");
  }
  // HTTP/1.0: no chunks, the close ends the body.
  Client old(server->port());
  ASSERT_TRUE(old.Send("GET /s HTTP/1.0\r\n\r\n"));
  std::optional<Response> r = old.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Header("transfer-encoding"), "");
  EXPECT_EQ(r->body, "data: a\n\ndata: bb\n\ndata: [DONE]\n\n");
}

TEST(HttpServerTest, AHandlerThatSendsNothingGets500) {
  HttpServerOptions o;
  o.error_body = [](int status, absl::string_view message) {
    return std::make_pair(std::string("application/json"), absl::StrCat("{\"status\":", status, "}"));
  };
  auto server = StartOrDie(o, [](const HttpRequest&, HttpResponseWriter&) {});
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.Send("GET /nothing HTTP/1.1\r\n\r\n"));
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 500);
    EXPECT_EQ(r->Header("content-type"), "application/json");
    EXPECT_EQ(r->body, "{\"status\":500}");
  }
}

TEST(HttpServerTest, AHandlersConnectionCloseClosesAfterTheResponse) {
  auto server = StartOrDie({}, [](const HttpRequest& req, HttpResponseWriter& w) {
    w.Send(200, "text/plain", "bye", {{"Connection", "close"}, {"Content-Length", "999"}});
  });
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("GET / HTTP/1.1\r\n\r\n"));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(r->Header("content-length"), "3");
  EXPECT_EQ(r->body, "bye");
  EXPECT_TRUE(c.WaitClosed());
}

TEST(HttpServerTest, AWriteToAClientThatDoesNotReadTimesOut) {
  HttpServerOptions o;
  o.write_timeout = absl::Milliseconds(300);
  Latch done;
  std::atomic<int> result{-1};
  auto server = StartOrDie(o, [&](const HttpRequest& req, HttpResponseWriter& w) {
    // More than the loopback socket buffers of both ends hold.
    result.store(w.Send(200, "application/octet-stream", std::string(64 << 20, 'x')) ? 1 : 0);
    done.Open();
  });
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("GET /big HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(done.Wait(absl::Seconds(30)));
  EXPECT_EQ(result.load(), 0);
  EXPECT_TRUE(WaitFor([&] { return server->stats().open_connections == 0; }));
}

// ---- The server's own errors ----

struct BadRequestCase {
  std::string request;
  int status;
};

TEST(HttpServerTest, BadRequestsGetTheirStatusAndAClose) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  o.max_header_bytes = 4096;
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  const std::vector<BadRequestCase> cases = {
      {"\x01\x02garbage\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: b\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
      {"GET / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(2048, 'x'), 413},
      {"GET / HTTP/1.1\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n", 431},
      {"GET / HTTP/1.1\r\nX-Big: " + std::string(8000, 'a'), 431},  // no end of head yet
  };
  for (const BadRequestCase& bad : cases) {
    Client c(server->port());
    ASSERT_TRUE(c.Send(bad.request));
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r.has_value()) << bad.request.substr(0, 60);
    EXPECT_EQ(r->status, bad.status) << bad.request.substr(0, 60);
    EXPECT_EQ(r->Header("connection"), "close");
    EXPECT_TRUE(c.WaitClosed()) << bad.request.substr(0, 60);
  }
  EXPECT_EQ(server->stats().bad_requests_total, static_cast<int64_t>(cases.size()));
  EXPECT_EQ(server->stats().requests_total, 0);
}

TEST(HttpServerTest, DuplicateEqualContentLengthsAndBareLfAreAccepted) {
  auto server = StartOrDie({});
  ASSERT_NE(server, nullptr);
  std::optional<Response> r =
      RoundTrip(server->port(), "\r\nPOST /lf HTTP/1.1\nContent-Length: 2\nContent-Length: 2\n\nok");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "POST /lf  ok");
}

// ---- Deadlines ----

// Sends one byte of `data` every 50 ms until a response (or the close) comes;
// returns what came back.
std::string Trickle(Client& c, absl::string_view data, absl::Duration give_up = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + give_up;
  size_t i = 0;
  while (absl::Now() < deadline) {
    if (!c.Send(data.substr(i % data.size(), 1))) break;
    ++i;
    if (!c.ReadSome(absl::Milliseconds(50)) && c.WaitClosed(absl::ZeroDuration())) break;
    if (!c.buffer().empty()) break;
  }
  c.WaitClosed();
  return c.buffer();
}

TEST(HttpServerTest, HeaderDeadlineIsHardEvenForATricklingClient) {
  HttpServerOptions o;
  o.header_timeout = absl::Milliseconds(300);
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("GET / HTTP/1.1\r\nX-Slow: "));
  const std::string got = Trickle(c, "abcdefgh");
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 408 ")) << got;
  EXPECT_EQ(server->stats().timed_out_total, 1);
  EXPECT_EQ(server->stats().requests_total, 0);
}

TEST(HttpServerTest, BodyDeadlineIsHard) {
  HttpServerOptions o;
  o.body_timeout = absl::Milliseconds(300);
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n"));
  const std::string got = Trickle(c, "x");
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 408 ")) << got;
  EXPECT_EQ(server->stats().timed_out_total, 1);
}

TEST(HttpServerTest, IdleKeepAliveConnectionIsClosedQuietly) {
  HttpServerOptions o;
  o.idle_timeout = absl::Milliseconds(300);
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  ASSERT_TRUE(c.Send("GET / HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(c.Read().has_value());
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.buffer(), "");  // no 408 for a connection between requests
  EXPECT_TRUE(WaitFor([&] { return server->stats().open_connections == 0; }));
  EXPECT_EQ(server->stats().timed_out_total, 1);
}

TEST(HttpServerTest, AFreshConnectionThatSendsNothingGets408) {
  HttpServerOptions o;
  o.header_timeout = absl::Milliseconds(300);
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  Client c(server->port());
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_TRUE(absl::StartsWith(c.buffer(), "HTTP/1.1 408 ")) << c.buffer();
}

// ---- Connections ----

TEST(HttpServerTest, PastMaxConnectionsANewOneGets503) {
  HttpServerOptions o;
  o.max_connections = 8;
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(std::make_unique<Client>(server->port()));
  ASSERT_TRUE(WaitFor([&] { return server->stats().open_connections == 8; }));
  Client ninth(server->port());
  std::optional<Response> r = ninth.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(ninth.WaitClosed());
  EXPECT_EQ(server->stats().refused_total, 1);
  // One gone: room for another, answered.
  idle.pop_back();
  ASSERT_TRUE(WaitFor([&] { return server->stats().open_connections == 7; }));
  r = RoundTrip(server->port(), "GET /room HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
}

// The reason for this server: slow clients of every kind hold connections,
// not workers, and a normal request is still answered at once.
TEST(HttpServerTest, SlowClientsDoNotHoldTheWorkers) {
  HttpServerOptions o;
  o.worker_threads = 4;
  o.header_timeout = absl::Seconds(60);
  o.body_timeout = absl::Seconds(60);
  o.idle_timeout = absl::Seconds(60);
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  constexpr int kEach = 64;
  std::vector<std::unique_ptr<Client>> trickling, idle, partial;
  for (int i = 0; i < kEach; ++i) {
    trickling.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(trickling.back()->Send("GET /slow HTTP/1.1\r\nX-Slow: "));
    idle.push_back(std::make_unique<Client>(server->port()));
    partial.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(partial.back()->Send("POST /part HTTP/1.1\r\nContent-Length: 1000\r\n\r\nonly some"));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::thread trickler([&] {
    while (!stop.load()) {
      for (auto& c : trickling) c->Send("a");
      rounds.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the trickle's pace
    }
  });
  ASSERT_TRUE(WaitFor([&] { return server->stats().open_connections == 3 * kEach && rounds.load() >= 3; }));
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    std::optional<Response> r = RoundTrip(server->port(), "GET /v1/models HTTP/1.1\r\n\r\n");
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(took, absl::Seconds(2));
  }
  stop.store(true);
  trickler.join();
  EXPECT_EQ(server->stats().timed_out_total, 0);
  EXPECT_EQ(server->stats().requests_total, 5);
}

TEST(HttpServerTest, FastLaneAnswersWhileEveryWorkerIsBusy) {
  Latch release;
  std::atomic<int> blocked{0};
  HttpServerOptions o;
  o.worker_threads = 1;
  o.fast_lane = [](const HttpRequest& r) { return r.method == "GET" && r.path == "/health"; };
  auto server = StartOrDie(o, [&](const HttpRequest& req, HttpResponseWriter& w) {
    if (req.path == "/block") {
      blocked.fetch_add(1);
      release.Wait();
    }
    w.Send(200, "text/plain", req.path);
  });
  ASSERT_NE(server, nullptr);
  Client busy(server->port());
  ASSERT_TRUE(busy.Send("GET /block HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(WaitFor([&] { return blocked.load() == 1; }));
  std::optional<Response> r = RoundTrip(server->port(), "GET /health HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "/health");
  release.Open();
  r = busy.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "/block");
}

TEST(HttpServerTest, DestructionClosesIdleConnectionsAndWaitsForHandlers) {
  Latch entered, release;
  std::atomic<bool> returned{false};
  auto server = StartOrDie({}, [&](const HttpRequest& req, HttpResponseWriter& w) {
    w.StartStream(200, "text/plain");
    w.Write("first");
    entered.Open();
    release.Wait();
    w.Write("second");
    w.EndStream();
    returned.store(true);
  });
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<Client>(server->port()));
  Client streaming(server->port());
  ASSERT_TRUE(streaming.Send("GET /s HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(entered.Wait());
  ASSERT_TRUE(WaitFor([&] { return server->stats().open_connections == 5; }));
  std::thread destroy([&] { server.reset(); });
  for (auto& c : idle) EXPECT_TRUE(c->WaitClosed());
  EXPECT_FALSE(returned.load());
  release.Open();
  destroy.join();
  EXPECT_TRUE(returned.load());
  std::optional<Response> r = streaming.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "firstsecond");
}

// ---- Options ----

TEST(HttpServerTest, BadOptionsAndBusyPortsAreErrors) {
  HttpServerOptions o;
  o.worker_threads = 0;
  EXPECT_EQ(HttpServer::Start(o, Echo).status().code(), absl::StatusCode::kInvalidArgument);
  o = HttpServerOptions();
  o.tls_cert_file = "/nonexistent/cert.pem";
  EXPECT_EQ(HttpServer::Start(o, Echo).status().code(), absl::StatusCode::kInvalidArgument);
  auto first = StartOrDie({});
  ASSERT_NE(first, nullptr);
  o = HttpServerOptions();
  o.port = first->port();
  o.name = "second";
  const absl::Status st = HttpServer::Start(o, Echo).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "second")) << st;
}

TEST(HttpServerTest, MissingTlsFilesAreInvalidArgument) {
  HttpServerOptions o;
  o.tls_cert_file = "/nonexistent/cert.pem";
  o.tls_key_file = "/nonexistent/key.pem";
  const absl::Status st = HttpServer::Start(o, Echo).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "/nonexistent/cert.pem")) << st;
}

// ---- TLS ----

// A self-signed certificate for localhost in a fresh directory; empty if
// openssl(1) is missing.
std::string MakeCertificate() {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) return "";
  std::string dir = testing::TempDir() + "http_server_test_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return "";
  const std::string cmd = absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -keyout ", dir, "/key.pem -out ",
                                       dir, "/cert.pem -days 1 -subj /CN=localhost >/dev/null 2>&1");
  return std::system(cmd.c_str()) == 0 ? dir : "";
}

// Sends `request` over TLS and reads responses until `count` are whole.
std::vector<Response> TlsExchange(int port, const std::string& request, int count) {
  std::vector<Response> out;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  Client c(port);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, c.fd());
  timeval tv{10, 0};
  setsockopt(c.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (SSL_connect(ssl) == 1 && SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
    std::string buf;
    bool eof = false;
    while (static_cast<int>(out.size()) < count) {
      Response r;
      size_t used = 0;
      if (ParseResponse(buf, eof, &r, &used)) {
        out.push_back(r);
        buf.erase(0, used);
        continue;
      }
      if (eof) break;
      char tmp[4096];
      const int n = SSL_read(ssl, tmp, sizeof(tmp));
      if (n <= 0) {
        eof = true;
      } else {
        buf.append(tmp, static_cast<size_t>(n));
      }
    }
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

TEST(HttpServerTest, ServesOverTls) {
  const std::string dir = MakeCertificate();
  if (dir.empty()) GTEST_SKIP() << "openssl(1) not found or failed: no certificate to test TLS with";
  HttpServerOptions o;
  o.tls_cert_file = dir + "/cert.pem";
  o.tls_key_file = dir + "/key.pem";
  auto server = StartOrDie(o, [](const HttpRequest& req, HttpResponseWriter& w) {
    if (req.path == "/stream") {
      w.StartStream(200, "text/event-stream");
      w.Write("data: 1\n\n");
      w.Write("data: 2\n\n");
      w.EndStream();
      return;
    }
    Echo(req, w);
  });
  ASSERT_NE(server, nullptr);
  // Keep-alive and pipelining over one TLS connection, then a stream.
  std::vector<Response> rs = TlsExchange(server->port(),
                                         "GET /a?q=1 HTTP/1.1\r\nHost: localhost\r\n\r\n"
                                         "POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
                                         "GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n",
                                         3);
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].body, "GET /a q=1 ");
  EXPECT_EQ(rs[1].body, "POST /b  xyz");
  EXPECT_EQ(rs[2].body, "data: 1\n\ndata: 2\n\n");
  // Plain HTTP on the TLS port: dropped, the server carries on.
  Client plain(server->port());
  ASSERT_TRUE(plain.Send("GET / HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(plain.WaitClosed());
  EXPECT_FALSE(absl::StrContains(plain.buffer(), "HTTP/1.1 200"));
  rs = TlsExchange(server->port(), "GET /again HTTP/1.1\r\n\r\n", 1);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, 200);
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

TEST(HttpServerTest, TlsHandshakeCountsAgainstTheHeaderDeadline) {
  const std::string dir = MakeCertificate();
  if (dir.empty()) GTEST_SKIP() << "openssl(1) not found or failed: no certificate to test TLS with";
  HttpServerOptions o;
  o.tls_cert_file = dir + "/cert.pem";
  o.tls_key_file = dir + "/key.pem";
  o.header_timeout = absl::Milliseconds(300);
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  Client silent(server->port());  // connects, never says hello
  EXPECT_TRUE(silent.WaitClosed());
  EXPECT_EQ(server->stats().timed_out_total, 1);
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

// ---- The parser alone ----

TEST(HttpRequestParserTest, ParsesAByteAtATime) {
  HttpRequestParser p(4096, 4096);
  const std::string wire =
      "POST /x?y=z HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
      "3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\nNEXT";
  std::string in;
  bool head_done = false;
  HttpRequestParser::Progress last = HttpRequestParser::Progress::kNeedMore;
  size_t fed = 0;
  while (last != HttpRequestParser::Progress::kComplete && fed < wire.size()) {
    in += wire[fed++];
    size_t used = 0;
    last = p.Parse(in, &used);
    in.erase(0, used);
    if (last == HttpRequestParser::Progress::kHeadDone) {
      head_done = true;
      EXPECT_TRUE(p.expects_continue());
      last = p.Parse(in, &used);
      in.erase(0, used);
    }
    ASSERT_NE(last, HttpRequestParser::Progress::kError) << p.error_message();
  }
  ASSERT_EQ(last, HttpRequestParser::Progress::kComplete);
  EXPECT_TRUE(head_done);
  EXPECT_EQ(p.request().method, "POST");
  EXPECT_EQ(p.request().path, "/x");
  EXPECT_EQ(p.request().query, "y=z");
  EXPECT_EQ(p.request().body, "abc0123456789abcdef");
  ASSERT_NE(p.request().Header("HOST"), nullptr);
  EXPECT_EQ(*p.request().Header("HOST"), "h");
  EXPECT_EQ(p.request().Header("missing"), nullptr);
  EXPECT_TRUE(p.keep_alive());
  EXPECT_EQ(wire.substr(fed), "NEXT");
  p.Reset();
  size_t used = 0;
  EXPECT_EQ(p.Parse("GET / HTTP/1.0\r\n\r\n", &used), HttpRequestParser::Progress::kComplete);
  EXPECT_FALSE(p.keep_alive());
  EXPECT_EQ(p.request().http_minor, 0);
}

}  // namespace
}  // namespace pdserve
