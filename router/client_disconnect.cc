#include "router/client_disconnect.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
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

namespace {

// "ADDR:PORT" of a socket address, the address as inet_ntop prints it.
std::string Endpoint(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
    return absl::StrCat(buf, ":", ntohs(a.sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf));
    return absl::StrCat(buf, ":", ntohs(a.sin6_port));
  }
  return "";
}

bool Matches(int fd, const std::string& local, const std::string& remote) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || Endpoint(ss) != remote) return false;
  len = sizeof(ss);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && Endpoint(ss) == local;
}

}  // namespace

absl::StatusOr<int> FindAcceptedSocket(const std::string& local_addr, int local_port,
                                       const std::string& remote_addr, int remote_port) {
  const std::string local = absl::StrCat(local_addr, ":", local_port);
  const std::string remote = absl::StrCat(remote_addr, ":", remote_port);
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return absl::NotFoundError("cannot list /proc/self/fd");
  int found = -1;
  while (const dirent* d = readdir(dir)) {
    int fd;
    if (!absl::SimpleAtoi(d->d_name, &fd) || fd == dirfd(dir)) continue;
    if (Matches(fd, local, remote)) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  if (found < 0) return absl::NotFoundError(absl::StrCat("no socket from ", remote.substr(0, 80), " to ", local.substr(0, 80)));
  return found;
}

}  // namespace pdserve
