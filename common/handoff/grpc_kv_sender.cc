// The gRPC transport: one DecodeWorker.PushKv client stream per hand-off.
#include "absl/strings/str_cat.h"
#include "common/handoff/fault_injection.h"
#include "common/handoff/grpc_send_session.h"
#include "common/handoff/kv_transports.h"
#include "common/net/grpc_status.h"
#include "common/net/server.h"
#include "common/util/status_macros.h"

namespace pdserve {

using internal::v1::DecodeWorker;
using internal::v1::KvChunk;

GrpcSendSession::GrpcSendSession(const ModelConfig& config, internal::v1::KvHeader header,
                                 const KvSenderOptions& options, std::shared_ptr<grpc::Channel> channel,
                                 absl::Time deadline, std::string address)
    : ChunkedSendSession(config, std::move(header), options.max_chunk_bytes),
      max_queued_bytes_(options.max_queued_bytes),
      stub_(DecodeWorker::NewStub(std::move(channel))),
      address_(std::move(address)),
      deadline_(deadline) {
  if (deadline != absl::InfiniteFuture()) context_.set_deadline(absl::ToChronoTime(deadline));
}

GrpcSendSession::~GrpcSendSession() { CancelSend(); }

absl::Status GrpcSendSession::Start() {
  writer_ = stub_->PushKv(&context_, &ack_);
  thread_ = std::thread([this] { WriteLoop(); });
  return Open();
}

void GrpcSendSession::CancelSend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_ && !closing_) {
      cancelled_ = true;
      cancel_requested_ = true;
      context_.TryCancel();
    }
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status GrpcSendSession::Deliver(std::vector<KvChunk> chunks) {
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

absl::StatusOr<KvHandoffAck> GrpcSendSession::AwaitAck() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join();
  RETURN_IF_ERROR(status_);
  return KvHandoffAck{static_cast<int64_t>(ack_.received_bytes())};
}

bool GrpcSendSession::WriteChunk(KvChunk& chunk, absl::Status* local_error) { return WriteToStream(chunk); }

void GrpcSendSession::WriteLoop() {
  absl::Status local_error;
  // Test-only fault injection (PDSERVE_FAULT_HANDOFF, fault_injection.h); null when off. This writer
  // loop is shared by the gRPC transport and the NCCL transport's gRPC control stream: it applies to both.
  std::unique_ptr<HandoffFaultPlan> fault = HandoffFaultPlan::ForNextHandoff();
  auto write = [&](KvChunk& chunk) { return WriteChunk(chunk, &local_error); };
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
    if (cancelled_) break;
    if (queue_.empty()) {
      lock.unlock();
      if (fault != nullptr) fault->Flush(write);
      writer_->WritesDone();
      lock.lock();
      break;
    }
    KvChunk c = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const int64_t bytes = static_cast<int64_t>(c.ByteSizeLong());
    const bool ok = fault != nullptr ? fault->Write(c, write, cancel_flag()) : write(c);
    lock.lock();
    queued_bytes_ -= bytes;
    cv_.notify_all();
    if (!ok) break;  // the stream broke or the receiver finished early: Finish() says why
  }
  lock.unlock();
  // A local failure leaves the stream open: cancel it, or Finish() would
  // wait for a receiver that waits for more chunks.
  if (!local_error.ok()) context_.TryCancel();
  grpc::Status st = writer_->Finish();
  lock.lock();
  if (cancelled_) {
    status_ = absl::CancelledError("hand-off cancelled");
  } else if (!local_error.ok() && (st.ok() || st.error_code() == grpc::StatusCode::CANCELLED)) {
    status_ = local_error;  // otherwise the receiver's rejection came first and says more
  } else if (!st.ok()) {
    status_ = FromGrpcStatus(st);
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
      status_ = absl::UnavailableError(absl::StrCat("decode worker ", address_, ": ", st.error_message()));
    }
  } else if (!queue_.empty()) {
    status_ = absl::DataLossError("decode worker closed the hand-off before the last chunk");
  }
  const absl::Status final_status = status_;
  lock.unlock();
  OnStreamDone(final_status);
  lock.lock();
  done_ = true;
  queue_.clear();
  queued_bytes_ = 0;
  cv_.notify_all();
}

std::shared_ptr<grpc::Channel> GrpcChannelCache::Get(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& ch = channels_[address];
  if (ch == nullptr) ch = MakeChannel(address, security_);
  return ch;
}

namespace {

class GrpcKvSender final : public KvSender {
 public:
  GrpcKvSender(const ModelConfig& config, const KvSenderOptions& options)
      : config_(config), options_(options), channels_(options.channel_security) {}

  absl::StatusOr<std::unique_ptr<KvSendSession>> StartSend(const std::string& decode_address,
                                                           KvHandoffHeader header,
                                                           absl::Time deadline) override {
    auto session = std::make_unique<GrpcSendSession>(config_, KvHeaderToWire(header), options_,
                                                     channels_.Get(decode_address), deadline, decode_address);
    RETURN_IF_ERROR(session->Start());
    return session;
  }

 private:
  const ModelConfig config_;
  const KvSenderOptions options_;
  GrpcChannelCache channels_;
};

}  // namespace

std::unique_ptr<KvSender> MakeGrpcKvSender(const ModelConfig& config, const KvSenderOptions& options) {
  return std::make_unique<GrpcKvSender>(config, options);
}

}  // namespace pdserve
