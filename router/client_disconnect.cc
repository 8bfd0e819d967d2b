#include "router/client_disconnect.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pdserve {

ClientDisconnectWatcher::ClientDisconnectWatcher() : wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  thread_ = std::thread([this] { Run(); });
}

ClientDisconnectWatcher::~ClientDisconnectWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  Wake();
  thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::unique_ptr<ClientDisconnectWatcher::Handle> ClientDisconnectWatcher::Watch(int fd,
                                                                                std::function<void()> on_gone) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    entries_.emplace(id, Entry{fd, std::move(on_gone)});
  }
  Wake();
  return std::unique_ptr<Handle>(new Handle(this, id));
}

int64_t ClientDisconnectWatcher::disconnects() const {
  std::lock_guard<std::mutex> lock(mu_);
  return disconnects_;
}

void ClientDisconnectWatcher::Unwatch(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);  // on_gone runs under mu_: after this, it is not running
    entries_.erase(id);
  }
  Wake();
}

void ClientDisconnectWatcher::Wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
}

void ClientDisconnectWatcher::Run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    ids.assign(1, 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      for (const auto& [id, e] : entries_) {
        fds.push_back(pollfd{e.fd, POLLRDHUP, 0});  // not POLLIN: a pipelined request is not a close
        ids.push_back(id);
      }
    }
    // Without an eventfd (EMFILE at start), fall back to looking every 100 ms.
    if (poll(fds.data(), fds.size(), wake_fd_ >= 0 ? -1 : 100) < 0) continue;  // EINTR
    if (fds[0].revents & POLLIN) {
      uint64_t n;
      (void)!read(wake_fd_, &n, sizeof(n));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 1; i < fds.size(); ++i) {
      // POLLNVAL: the fd was closed while watched (against the contract); drop it, or poll would spin.
      if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0) continue;
      auto it = entries_.find(ids[i]);  // absent: unwatched while we polled (its fd may be reused)
      if (it == entries_.end()) continue;
      std::function<void()> on_gone = std::move(it->second.on_gone);
      entries_.erase(it);
      ++disconnects_;
      on_gone();
    }
  }
}

}  // namespace pdserve
