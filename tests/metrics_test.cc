// The /metrics HTTP server (issue 12, defect 9): slow or idle clients must not
// block other scrapes, other paths are 404, and the body is the registry's
// rendering byte for byte. Raw sockets on loopback, no HTTP client library.
#include "common/net/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace pdserve {
namespace {

// Every socket in this test gives up after this long: a server that blocks
// fails the test instead of hanging it.
constexpr int kSocketTimeoutSeconds = 10;

// A connected loopback socket with send/receive timeouts, or -1.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{};
  tv.tv_sec = kSocketTimeoutSeconds;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

struct HttpResult {
  bool complete = false;  // the server closed the connection after answering
  std::string status_line;
  std::string head;
  std::string body;
};

// Sends `request` (a full HTTP/1.1 request with Connection: close) and reads
// until the server closes. Incomplete when a send or receive times out.
HttpResult Exchange(int port, const std::string& request) {
  HttpResult out;
  const int fd = Connect(port);
  if (fd < 0) return out;
  if (!SendAll(fd, request)) {
    close(fd);
    return out;
  }
  std::string all;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {  // timed out (or failed) before the server closed
      close(fd);
      return out;
    }
    if (n == 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t head_end = all.find("\r\n\r\n");
  if (head_end == std::string::npos) return out;
  out.complete = true;
  out.head = all.substr(0, head_end);
  out.status_line = out.head.substr(0, out.head.find("\r\n"));
  out.body = all.substr(head_end + 4);
  return out;
}

HttpResult Get(int port, const std::string& path) {
  return Exchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.GetCounter("pdserve_test_requests_total", "Requests seen by the test.", {{"code", "OK"}})->Increment(3);
    registry_.AddCallbackGauge("pdserve_test_queue_depth", "A gauge.", [] { return 7.0; });
    registry_.GetHistogram("pdserve_test_latency_seconds", "A histogram.", ExponentialBuckets(0.001, 10, 3))
        ->Observe(0.05);
    auto server = ServeMetrics("127.0.0.1", 0, &registry_, "metrics_test");
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_NE(*server, nullptr);
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
  }

  MetricsRegistry registry_;
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsServerTest, ServesTheRegistryByteForByte) {
  const HttpResult r = Get(server_->port(), "/metrics");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_NE(r.head.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"), std::string::npos) << r.head;
  EXPECT_EQ(r.body, registry_.Render());
  EXPECT_NE(r.body.find("# TYPE pdserve_test_requests_total counter\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("pdserve_test_requests_total{code=\"OK\"} 3\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("pdserve_test_queue_depth 7\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("pdserve_test_latency_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << r.body;

  // A later update shows in the next scrape.
  registry_.GetCounter("pdserve_test_requests_total", "", {{"code", "OK"}})->Increment();
  const HttpResult again = Get(server_->port(), "/metrics");
  ASSERT_TRUE(again.complete);
  EXPECT_NE(again.body.find("pdserve_test_requests_total{code=\"OK\"} 4\n"), std::string::npos) << again.body;
}

TEST_F(MetricsServerTest, OtherPathsAreNotFound) {
  const HttpResult r = Get(server_->port(), "/nope");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.status_line, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(r.body, "not found: try GET /metrics\n");

  const HttpResult prefix = Get(server_->port(), "/metricsfoo");
  ASSERT_TRUE(prefix.complete);
  EXPECT_EQ(prefix.status_line, "HTTP/1.1 404 Not Found");

  const HttpResult root = Get(server_->port(), "/");
  ASSERT_TRUE(root.complete);
  EXPECT_EQ(root.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(root.body, "pdserve: metrics at /metrics\n");
}

// The defect: one client that trickles its request (a byte every half
// second, never finishing) held the only connection slot, so every other
// scrape waited behind it. Now it holds one worker, and a scrape made
// meanwhile is answered in full.
TEST_F(MetricsServerTest, SlowClientDoesNotBlockAScrape) {
  const int slow = Connect(server_->port());
  ASSERT_GE(slow, 0);
  ASSERT_TRUE(SendAll(slow, "GET /metrics HTTP/1.1\r\nX-Slow: "));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    for (int i = 0; i < 60 && !stop; ++i) {  // at most 30 s
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (!stop && !SendAll(slow, "a")) break;
    }
  });
  // No wait needed for "the server has the slow one": connect() returned, so
  // the slow connection sits in the listening socket's (FIFO) accept queue
  // ahead of the scrape's below, with its partial request sent; a server that
  // answers the scrape has accepted the slow connection first.

  const HttpResult r = Get(server_->port(), "/metrics");
  stop = true;
  trickle.join();
  close(slow);
  ASSERT_TRUE(r.complete) << "a scrape got no full answer within " << kSocketTimeoutSeconds
                          << " s while a slow client was connected";
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(r.body, registry_.Render());
}

// Connections that send nothing at all are dropped after the keep-alive
// timeout; more of them than there are workers still cannot starve a scrape.
TEST_F(MetricsServerTest, IdleConnectionsDoNotBlockAScrape) {
  std::vector<int> idle;
  for (int i = 0; i < 2 * MetricsHttpServer::kWorkerThreads; ++i) {
    const int fd = Connect(server_->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // Every idle connection is established (connect() returned) and so ahead
  // of the scrape's in the FIFO accept queue: no sleep needed to order them.
  const HttpResult r = Get(server_->port(), "/metrics");
  for (int fd : idle) close(fd);
  ASSERT_TRUE(r.complete) << "a scrape got no full answer within " << kSocketTimeoutSeconds
                          << " s behind idle connections";
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_NE(r.body.find("pdserve_test_requests_total{code=\"OK\"} 3\n"), std::string::npos);
}

// Two servers on one port is an error, not a silent split of the scrapes
// (httplib's default SO_REUSEPORT would allow it).
TEST_F(MetricsServerTest, ABusyPortIsUnavailable) {
  auto second = MetricsHttpServer::Start("127.0.0.1", server_->port(), &registry_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(ServeMetricsTest, NegativePortIsOff) {
  MetricsRegistry registry;
  auto off_host = ServeMetrics("127.0.0.1", -1, &registry, "metrics_test");
  ASSERT_TRUE(off_host.ok());
  EXPECT_EQ(*off_host, nullptr);
}

// 0.0.0.0 binds every interface, loopback included.
TEST(ServeMetricsTest, AllInterfacesServeLoopback) {
  MetricsRegistry registry;
  registry.GetCounter("pdserve_test_total", "t")->Increment();
  auto server = ServeMetrics("0.0.0.0", 0, &registry, "metrics_test");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE(*server, nullptr);
  EXPECT_EQ((*server)->host(), "0.0.0.0");
  const HttpResult r = Get((*server)->port(), "/metrics");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.body, registry.Render());
}

TEST(ServeMetricsTest, EmptyHostIsInvalid) {
  MetricsRegistry registry;
  auto server = MetricsHttpServer::Start("", 0, &registry);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve
