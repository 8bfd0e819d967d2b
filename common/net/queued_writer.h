// QueuedWriter: a server-streaming reactor that any thread may feed.
// Send() queues a message and starts a write when none is in flight;
// OnWriteDone starts the next. Close() finishes once the queue drains. So
// producers (the decode loop, the router's orchestration) never block on
// the network, and the reactor never blocks on them.
//
// Lifetime: the reactor holds a reference to itself until gRPC calls
// OnDone; producers hold std::shared_ptr, so Send() after the call ended is
// a safe no-op.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include <grpcpp/grpcpp.h>

namespace pdserve {

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

  // Queues `msg`. Returns false when the call is over (cancelled, broken or
  // closed).
  bool Send(Msg msg) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_ || broken_) return false;
    queue_.push_back(std::move(msg));
    if (writing_) return true;
    writing_ = true;
    Msg* front = &queue_.front();  // deque: stays valid while others are pushed
    lock.unlock();
    this->StartWrite(front);
    return true;
  }

  // Finishes the call with `status` once queued messages are written. Only
  // the first Close counts.
  void Close(const grpc::Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_) return;
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
    queue_.pop_front();
    if (!ok) {
      // The stream is gone; drop the rest.
      queue_.clear();
      broken_ = true;
    }
    if (!queue_.empty()) {
      Msg* front = &queue_.front();
      lock.unlock();
      this->StartWrite(front);
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
  std::shared_ptr<QueuedWriter> self_;
};

}  // namespace pdserve
