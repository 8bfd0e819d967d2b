// QueuedWriter: a server-streaming reactor that any thread may feed.
// Send() queues a message and starts a write when none is in flight;
// OnWriteDone starts the next. Close() finishes once the queue drains. So
// producers (the decode loop, the router's orchestration) never block on
// the network, and the reactor never blocks on them.
//
// Lifetime: the reactor holds a reference to itself until gRPC calls
// OnDone; producers hold std::shared_ptr, so Send() after the call ended is
// a safe no-op.
//
// A client that stops reading cannot make the server buffer without bound:
// past QueuedWriterLimits (messages queued on this stream, in the whole
// process, or a write stuck for stall_timeout) Send() cancels the call, so
// the producer sees a stream that is gone and frees what it holds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace pdserve {

struct QueuedWriterLimits {
  // Messages one stream may have queued behind the wire.
  int64_t max_queued_per_stream = 4096;
  // Messages all streams of the process may have queued together.
  int64_t max_queued_total = int64_t{1} << 20;
  // The longest one write may wait for the client to read.
  std::chrono::steady_clock::duration stall_timeout = std::chrono::seconds(60);
};

// Messages queued by every QueuedWriter of the process (for the total cap).
inline std::atomic<int64_t>& QueuedWriterTotal() {
  static std::atomic<int64_t> total{0};
  return total;
}

template <typename Msg>
class QueuedWriter : public grpc::ServerWriteReactor<Msg>, public std::enable_shared_from_this<QueuedWriter<Msg>> {
 public:
  // Creates a writer that owns itself until the call is done.
  template <typename T, typename... Args>
  static std::shared_ptr<T> Create(Args&&... args) {
    auto w = std::make_shared<T>(std::forward<Args>(args)...);
    w->self_ = w;
    return w;
  }

  ~QueuedWriter() override {
    QueuedWriterTotal().fetch_sub(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
  }

  // Lets Send() cancel the call when the client stops reading (see the
  // file comment). Without it the queue is unbounded.
  void BindContext(grpc::CallbackServerContext* context, QueuedWriterLimits limits = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    context_ = context;
    limits_ = limits;
  }

  // Queues `msg`. Returns false when the call is over (cancelled, broken,
  // closed, or cancelled now because the client does not read).
  bool Send(Msg msg) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_ || broken_) return false;
    if (context_ != nullptr && Overflowing()) {
      broken_ = true;
      // Under mu_, so that no Finish (and OnDone, which ends the context)
      // can come first; gRPC runs OnCancel on its executor, not inline.
      context_->TryCancel();  // the pending write fails; OnCancel follows
      return false;
    }
    queue_.push_back(std::move(msg));
    QueuedWriterTotal().fetch_add(1, std::memory_order_relaxed);
    if (writing_) return true;
    StartFront(&lock);
    return true;
  }

  // Trailing metadata entries: key, value.
  using Trailers = std::vector<std::pair<std::string, std::string>>;

  // Finishes the call with `status` once queued messages are written. Only
  // the first Close counts.
  void Close(const grpc::Status& status) { Close(status, Trailers{}); }

  // Close with one trailing metadata entry.
  void Close(const grpc::Status& status, const std::string& trailer_key, const std::string& trailer_value) {
    Close(status, Trailers{{trailer_key, trailer_value}});
  }

  // Close with trailing metadata (needs BindContext; entries with an empty
  // key are skipped), added only by the Close that counts.
  void Close(const grpc::Status& status, const Trailers& trailers) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_) return;
    for (const auto& [key, value] : trailers) {
      if (!key.empty() && context_ != nullptr) context_->AddTrailingMetadata(key, value);
    }
    closing_ = true;
    status_ = status;
    if (writing_) return;  // OnWriteDone finishes
    finished_ = true;
    lock.unlock();
    this->Finish(status);
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closing_ || broken_;
  }

 protected:
  // Called once when the client cancels, the deadline passes or the stream
  // breaks. The subclass stops producing. Runs on a gRPC thread: no blocking.
  virtual void OnStreamGone() {}

 private:
  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    PopFront();
    if (!ok) {
      // The stream is gone; drop the rest.
      while (!queue_.empty()) PopFront();
      broken_ = true;
    }
    if (!queue_.empty()) {
      StartFront(&lock);
      return;
    }
    writing_ = false;
    const bool finish = (closing_ || broken_) && !finished_;
    if (finish) finished_ = true;
    if (broken_ && !closing_) {
      closing_ = true;
      status_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
    }
    const grpc::Status status = status_;
    const bool notify = !ok;
    lock.unlock();
    if (notify) NotifyGone();
    if (finish) this->Finish(status);
  }

  void OnCancel() override {
    NotifyGone();
    Close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

  void OnDone() override {
    NotifyGone();
    self_.reset();  // may delete this: last statement
  }

  // mu_ held; unlocks it.
  void StartFront(std::unique_lock<std::mutex>* lock) {
    writing_ = true;
    write_started_ = std::chrono::steady_clock::now();
    Msg* front = &queue_.front();  // deque: stays valid while others are pushed
    lock->unlock();
    this->StartWrite(front);
  }

  void PopFront() {
    queue_.pop_front();
    QueuedWriterTotal().fetch_sub(1, std::memory_order_relaxed);
  }

  // mu_ held.
  bool Overflowing() const {
    if (static_cast<int64_t>(queue_.size()) >= limits_.max_queued_per_stream) return true;
    if (QueuedWriterTotal().load(std::memory_order_relaxed) >= limits_.max_queued_total) return true;
    return writing_ && std::chrono::steady_clock::now() - write_started_ > limits_.stall_timeout;
  }

  void NotifyGone() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gone_notified_) return;
      gone_notified_ = true;
    }
    OnStreamGone();
  }

  mutable std::mutex mu_;
  std::deque<Msg> queue_;
  bool writing_ = false;
  bool closing_ = false;
  bool broken_ = false;
  bool finished_ = false;
  bool gone_notified_ = false;
  grpc::Status status_;
  grpc::CallbackServerContext* context_ = nullptr;
  QueuedWriterLimits limits_;
  std::chrono::steady_clock::time_point write_started_;
  std::shared_ptr<QueuedWriter> self_;
};

}  // namespace pdserve
