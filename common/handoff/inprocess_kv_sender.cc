// The in-process transport: chunks go straight into the decode worker's
// session (through a ChunkReceiveSession) on the caller's thread. Same
// chunks, same validation as gRPC, no copies through a socket.
#include "common/handoff/kv_transports.h"

#include "absl/strings/str_cat.h"
#include "common/handoff/chunk_receive_session.h"
#include "common/handoff/chunked_send_session.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

class InProcessSendSession final : public ChunkedSendSession {
 public:
  InProcessSendSession(const ModelConfig& config, internal::v1::KvHeader header, int64_t max_chunk_bytes,
                       std::unique_ptr<ChunkReceiveSession> receiver)
      : ChunkedSendSession(config, std::move(header), max_chunk_bytes), receiver_(std::move(receiver)) {}

  ~InProcessSendSession() override { CancelSend(); }

  absl::Status Start() { return Open(); }

  void CancelSend() override {
    if (receiver_ != nullptr && !finished() && error_.ok()) {
      receiver_->AbortReceive(absl::CancelledError("the prefill worker abandoned the hand-off"));
    }
    receiver_.reset();
  }

 protected:
  absl::Status Deliver(std::vector<internal::v1::KvChunk> chunks) override {
    RETURN_IF_ERROR(error_);
    if (receiver_ == nullptr) return absl::CancelledError("hand-off cancelled");
    for (const auto& c : chunks) {
      absl::Status st = receiver_->ReceiveChunk(c);
      if (!st.ok()) {
        receiver_->AbortReceive(st);
        error_ = st;
        return st;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<KvHandoffAck> AwaitAck() override {
    RETURN_IF_ERROR(error_);
    auto ack = receiver_->FinishReceive();
    if (!ack.ok()) error_ = ack.status();
    return ack;
  }

 private:
  std::unique_ptr<ChunkReceiveSession> receiver_;
  absl::Status error_;
};

class InProcessKvSender final : public KvSender {
 public:
  InProcessKvSender(const ModelConfig& config, const KvSenderOptions& options)
      : config_(config),
        options_(options),
        registry_(options.registry != nullptr ? options.registry : &InProcessKvRegistry::Global()) {}

  absl::StatusOr<std::unique_ptr<KvSendSession>> StartSend(const std::string& decode_address,
                                                            KvHandoffHeader header,
                                                            absl::Time deadline) override {
    KvReceiver* receiver = registry_->Find(decode_address);
    if (receiver == nullptr) {
      return absl::UnavailableError(absl::StrCat("no decode worker at ", decode_address, " in this process"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<ChunkReceiveSession> rs, ChunkReceiveSession::Begin(receiver));
    auto session = std::make_unique<InProcessSendSession>(config_, KvHeaderToWire(header), options_.max_chunk_bytes,
                                                          std::move(rs));
    RETURN_IF_ERROR(session->Start());
    return session;
  }

 private:
  const ModelConfig config_;
  const KvSenderOptions options_;
  InProcessKvRegistry* registry_;
};

}  // namespace

std::unique_ptr<KvSender> MakeInProcessKvSender(const ModelConfig& config, const KvSenderOptions& options) {
  return std::make_unique<InProcessKvSender>(config, options);
}

}  // namespace pdserve
