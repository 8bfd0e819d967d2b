// ClientDisconnectWatcher: notices an HTTP client that closes its connection
// while the handler is still waiting on the router, with nothing to write
// yet (a non-streaming completion, or a stream before its first token), so
// that the request's work is cancelled instead of running to its end.
// Streams notice a gone client on their next write (openai_http.h); this
// covers the time before there is one.
//
//   ClientDisconnectWatcher         one thread polling every watched socket
//   ClientDisconnectWatcher::Watch  watch a socket; the returned handle's
//                                   lifetime is the watch
//
// "Closed" is the peer's FIN or a reset (POLLRDHUP, POLLHUP, POLLERR). A
// client that half-closes after sending its request (shutdown(SHUT_WR)) and
// still waits for the answer would be taken for gone; HTTP clients do not
// do that (vLLM's is_disconnected() makes the same call).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>


namespace pdserve {

class ClientDisconnectWatcher {
 public:
  // Starts the polling thread (it sleeps in poll() while nothing changes).
  ClientDisconnectWatcher();
  // Joins the thread; every handle must be gone first.
  ~ClientDisconnectWatcher();
  ClientDisconnectWatcher(const ClientDisconnectWatcher&) = delete;
  ClientDisconnectWatcher& operator=(const ClientDisconnectWatcher&) = delete;

  class Handle;
  // Calls `on_gone` at most once, on the watcher's thread, when `fd`'s peer
  // has closed the connection. `on_gone` must not block (a gRPC TryCancel).
  // Once the handle is destroyed, `on_gone` is neither running nor called
  // again. `fd` must stay open while the handle lives.
  std::unique_ptr<Handle> Watch(int fd, std::function<void()> on_gone);

  // Sockets noticed closed so far (for tests and logs).
  int64_t disconnects() const;

 private:
  struct Entry {
    int fd;
    std::function<void()> on_gone;
  };
  void Unwatch(uint64_t id);
  void Wake();
  void Run();

  mutable std::mutex mu_;
  std::map<uint64_t, Entry> entries_;  // guarded by mu_
  uint64_t next_id_ = 1;               // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  int64_t disconnects_ = 0;            // guarded by mu_
  int wake_fd_ = -1;                   // eventfd: the set changed, or stop
  std::thread thread_;
};

class ClientDisconnectWatcher::Handle {
 public:
  ~Handle() { watcher_->Unwatch(id_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

 private:
  friend class ClientDisconnectWatcher;
  Handle(ClientDisconnectWatcher* watcher, uint64_t id) : watcher_(watcher), id_(id) {}
  ClientDisconnectWatcher* watcher_;
  uint64_t id_;
};

}  // namespace pdserve
