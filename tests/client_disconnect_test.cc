// ClientDisconnectWatcher (router/client_disconnect.h)
// on real loopback TCP connections: a close or a reset by the peer calls
// on_gone once; data from the peer does not; a destroyed handle is never
// called; the accepted socket is found by its addresses.
#include "router/client_disconnect.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

namespace pdserve {
namespace {

// A connected pair over 127.0.0.1: `client` and the server's `accepted`.
struct TcpPair {
  int listener = -1, client = -1, accepted = -1;
  int server_port = 0, client_port = 0;
  TcpPair() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listener, 4), 0);
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    server_port = ntohs(a.sin_port);
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    accepted = accept(listener, nullptr, nullptr);
    EXPECT_GE(accepted, 0);
    len = sizeof(a);
    getsockname(client, reinterpret_cast<sockaddr*>(&a), &len);
    client_port = ntohs(a.sin_port);
  }
  ~TcpPair() {
    for (int fd : {listener, client, accepted}) {
      if (fd >= 0) close(fd);
    }
  }
  void CloseClient() {
    close(client);
    client = -1;
  }
  void ResetClient() {  // SO_LINGER 0: close sends RST
    linger l{1, 0};
    setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    CloseClient();
  }
};

// Counts on_gone calls; waits for the first.
struct Gone {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  std::function<void()> Callback() {
    return [this] {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
      cv.notify_all();
    };
  }
  bool WaitFor(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, d, [this] { return calls > 0; });
  }
};

TEST(ClientDisconnectTest, PeerCloseCallsOnGoneOnce) {
  ClientDisconnectWatcher watcher;
  TcpPair p;
  Gone gone;
  auto handle = watcher.Watch(p.accepted, gone.Callback());
  p.CloseClient();
  ASSERT_TRUE(gone.WaitFor(std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(gone.calls, 1);
  EXPECT_EQ(watcher.disconnects(), 1);
}

TEST(ClientDisconnectTest, PeerResetCallsOnGone) {
  ClientDisconnectWatcher watcher;
  TcpPair p;
  Gone gone;
  auto handle = watcher.Watch(p.accepted, gone.Callback());
  p.ResetClient();
  EXPECT_TRUE(gone.WaitFor(std::chrono::seconds(10)));
}

TEST(ClientDisconnectTest, DataFromAPeerStillConnectedIsNotAClose) {
  ClientDisconnectWatcher watcher;
  TcpPair p;
  TcpPair closed;  // a second watched connection that does close: the watcher is awake and polling
  Gone gone, other;
  auto handle = watcher.Watch(p.accepted, gone.Callback());
  auto other_handle = watcher.Watch(closed.accepted, other.Callback());
  ASSERT_EQ(write(p.client, "GET / HTTP/1.1\r\n\r\n", 18), 18);  // a pipelined request, unread
  closed.CloseClient();
  ASSERT_TRUE(other.WaitFor(std::chrono::seconds(10)));
  EXPECT_FALSE(gone.WaitFor(std::chrono::milliseconds(200)));
  EXPECT_EQ(watcher.disconnects(), 1);
}

TEST(ClientDisconnectTest, DestroyedHandleIsNeverCalled) {
  ClientDisconnectWatcher watcher;
  TcpPair p, q;
  Gone gone, witness;
  watcher.Watch(p.accepted, gone.Callback()).reset();
  auto witness_handle = watcher.Watch(q.accepted, witness.Callback());
  p.CloseClient();
  q.CloseClient();
  ASSERT_TRUE(witness.WaitFor(std::chrono::seconds(10)));  // the watcher has seen both closes by now
  EXPECT_EQ(gone.calls, 0);
  EXPECT_EQ(watcher.disconnects(), 1);
}

TEST(ClientDisconnectTest, ManyWatchesComeAndGo) {
  ClientDisconnectWatcher watcher;
  for (int i = 0; i < 50; ++i) {
    TcpPair p;
    Gone gone;
    auto handle = watcher.Watch(p.accepted, gone.Callback());
    if (i % 2 == 0) {
      p.CloseClient();
      ASSERT_TRUE(gone.WaitFor(std::chrono::seconds(10))) << i;
    }
  }
  EXPECT_EQ(watcher.disconnects(), 25);
}

}  // namespace
}  // namespace pdserve
