// The gRPC hand-off session (one DecodeWorker.PushKv client stream) and the
// channel cache, shared by the gRPC and NCCL transports: the NCCL one sends
// the same stream with the data chunks' payloads moved to NCCL.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/handoff/chunked_send_session.h"
#include "common/net/server.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve {

// A writer thread drains a bounded queue, so that SendLayer returns while
// the bytes are still on the wire and prefill goes on with the next layer.
class GrpcSendSession : public ChunkedSendSession {
 public:
  GrpcSendSession(const ModelConfig& config, internal::v1::KvHeader header, const KvSenderOptions& options,
                  std::shared_ptr<grpc::Channel> channel, absl::Time deadline, std::string address);
  // Subclasses must call CancelSend() in their own destructor: the writer
  // thread calls their hooks.
  ~GrpcSendSession() override;

  // Opens the stream and queues the header. The stream's error otherwise.
  absl::Status Start();
  void CancelSend() override;

 protected:
  absl::Status Deliver(std::vector<internal::v1::KvChunk> chunks) override;
  absl::StatusOr<KvHandoffAck> AwaitAck() override;

  // Writes one chunk, on the writer thread. Returns false when the stream
  // broke (the call's status says why) or, with *local_error set, when the
  // transport itself failed (the call is then cancelled).
  virtual bool WriteChunk(internal::v1::KvChunk& chunk, absl::Status* local_error);
  // On the writer thread once the call is over: OK when the receiver
  // acknowledged, else the session's error.
  virtual void OnStreamDone(const absl::Status& status) {}

  bool WriteToStream(const internal::v1::KvChunk& chunk) { return writer_->Write(chunk); }
  // True once CancelSend was called before the end; for waits on the writer
  // thread that must stop early.
  const std::atomic<bool>* cancel_flag() const { return &cancel_requested_; }
  const std::string& address() const { return address_; }
  absl::Time deadline() const { return deadline_; }

 private:
  void WriteLoop();

  const int64_t max_queued_bytes_;
  std::unique_ptr<internal::v1::DecodeWorker::Stub> stub_;
  const std::string address_;
  const absl::Time deadline_;
  grpc::ClientContext context_;
  internal::v1::PushKvResponse ack_;
  std::unique_ptr<grpc::ClientWriter<internal::v1::KvChunk>> writer_;
  std::thread thread_;
  std::atomic<bool> cancel_requested_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<internal::v1::KvChunk> queue_;
  int64_t queued_bytes_ = 0;
  bool closing_ = false;    // no more chunks will come
  bool cancelled_ = false;  // CancelSend before the end
  bool done_ = false;       // the writer thread has finished the call
  absl::Status status_;
};

// One channel (HTTP/2 connection) per decode worker, reused by every
// hand-off. Thread-safe.
class GrpcChannelCache {
 public:
  explicit GrpcChannelCache(ChannelSecurity security = {}) : security_(std::move(security)) {}
  std::shared_ptr<grpc::Channel> Get(const std::string& address);

 private:
  const ChannelSecurity security_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_;
};

}  // namespace pdserve
