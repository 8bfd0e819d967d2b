// The gRPC transport: one DecodeWorker.PushKv client stream per hand-off.
// A writer thread drains a bounded queue, so that SendLayer returns while
// the bytes are still on the wire and prefill goes on with the next layer.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/handoff/chunked_send_session.h"
#include "common/handoff/kv_transports.h"
#include "common/net/grpc_status.h"
#include "common/net/server.h"
#include "common/util/status_macros.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve {
namespace {

using internal::v1::DecodeWorker;
using internal::v1::KvChunk;

class GrpcSendSession final : public ChunkedSendSession {
 public:
  GrpcSendSession(const ModelConfig& config, internal::v1::KvHeader header, const KvSenderOptions& options,
                  std::shared_ptr<grpc::Channel> channel, absl::Time deadline, std::string address)
      : ChunkedSendSession(config, std::move(header), options.max_chunk_bytes),
        max_queued_bytes_(options.max_queued_bytes),
        stub_(DecodeWorker::NewStub(std::move(channel))),
        address_(std::move(address)) {
    if (deadline != absl::InfiniteFuture()) context_.set_deadline(absl::ToChronoTime(deadline));
  }

  ~GrpcSendSession() override { CancelSend(); }

  absl::Status Start() {
    writer_ = stub_->PushKv(&context_, &ack_);
    thread_ = std::thread([this] { WriteLoop(); });
    return Open();
  }

  void CancelSend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_ && !closing_) {
        cancelled_ = true;
        context_.TryCancel();
      }
      closing_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 protected:
  absl::Status Deliver(std::vector<KvChunk> chunks) override {
    std::unique_lock<std::mutex> lock(mu_);
    for (auto& c : chunks) {
      const int64_t bytes = static_cast<int64_t>(c.ByteSizeLong());
      // Backpressure: wait for the wire, not for memory to grow.
      cv_.wait(lock, [&] { return done_ || queued_bytes_ == 0 || queued_bytes_ + bytes <= max_queued_bytes_; });
      if (done_) return status_;
      queued_bytes_ += bytes;
      queue_.push_back(std::move(c));
      cv_.notify_all();  // the writer may be asleep while we wait for room
    }
    lock.unlock();
    cv_.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<internal::v1::PushKvResponse> AwaitAck() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
    RETURN_IF_ERROR(status_);
    return ack_;
  }

 private:
  void WriteLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (cancelled_) break;
      if (queue_.empty()) {
        lock.unlock();
        writer_->WritesDone();
        lock.lock();
        break;
      }
      KvChunk c = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      const int64_t bytes = static_cast<int64_t>(c.ByteSizeLong());
      const bool ok = writer_->Write(c);
      lock.lock();
      queued_bytes_ -= bytes;
      cv_.notify_all();
      if (!ok) break;  // the stream broke or the receiver finished early: Finish() says why
    }
    lock.unlock();
    grpc::Status st = writer_->Finish();
    lock.lock();
    if (cancelled_) {
      status_ = absl::CancelledError("hand-off cancelled");
    } else if (!st.ok()) {
      status_ = FromGrpcStatus(st);
      if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
        status_ = absl::UnavailableError(absl::StrCat("decode worker ", address_, ": ", st.error_message()));
      }
    } else if (!queue_.empty()) {
      status_ = absl::DataLossError("decode worker closed the hand-off before the last chunk");
    }
    done_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    cv_.notify_all();
  }

  const int64_t max_queued_bytes_;
  std::unique_ptr<DecodeWorker::Stub> stub_;
  const std::string address_;
  grpc::ClientContext context_;
  internal::v1::PushKvResponse ack_;
  std::unique_ptr<grpc::ClientWriter<KvChunk>> writer_;
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KvChunk> queue_;
  int64_t queued_bytes_ = 0;
  bool closing_ = false;    // no more chunks will come
  bool cancelled_ = false;  // CancelSend before the end
  bool done_ = false;       // the writer thread has finished the call
  absl::Status status_;
};

class GrpcKvSender final : public KvSender {
 public:
  GrpcKvSender(const ModelConfig& config, const KvSenderOptions& options) : config_(config), options_(options) {}

  absl::StatusOr<std::unique_ptr<KvSendSession>> StartSend(const std::string& decode_address,
                                                            internal::v1::KvHeader header,
                                                            absl::Time deadline) override {
    auto session = std::make_unique<GrpcSendSession>(config_, std::move(header), options_,
                                                     Channel(decode_address), deadline, decode_address);
    RETURN_IF_ERROR(session->Start());
    return session;
  }

 private:
  // One channel (HTTP/2 connection) per decode worker, reused by every hand-off.
  std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& ch = channels_[address];
    if (ch == nullptr) ch = MakeChannel(address);
    return ch;
  }

  const ModelConfig config_;
  const KvSenderOptions options_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_;
};

}  // namespace

std::unique_ptr<KvSender> MakeGrpcKvSender(const ModelConfig& config, const KvSenderOptions& options) {
  return std::make_unique<GrpcKvSender>(config, options);
}

}  // namespace pdserve
