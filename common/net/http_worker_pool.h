// The threads of HttpServer (http_server.h) that run handlers. Internal to the
// server (http_server.cc); other code uses http_server.h.
//
// Contents:
//   BlockSigpipe - blocks SIGPIPE on the calling thread (every thread of the
//                  server calls it).
//   WorkerPool   - threads that run one Conn's handler at a time, in arrival
//                  order; Stop joins them and hands back the Conns never run.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/net/http_connection.h"

namespace pdserve {
namespace http_internal {

// OpenSSL writes with write(2), without MSG_NOSIGNAL: a peer gone would kill
// the process with SIGPIPE. Every thread of the server blocks it, so the
// write fails with EPIPE instead (the signal stays pending on that thread).
inline void BlockSigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

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

}  // namespace http_internal
}  // namespace pdserve
