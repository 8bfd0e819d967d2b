#include "common/handoff/chunk_receive_session.h"

#include "absl/synchronization/mutex.h"
#include "common/handoff/kv_wire.h"
#include "common/util/status_macros.h"

namespace pdserve {

using internal::v1::KvChunk;

// The decoder and its tensors, which the receiver may drop at any time.
class ChunkReceiveSession::Buffers final : public KvReceiveBuffers {
 public:
  Buffers(const ModelConfig& config, KvReceiveLimits limits)
      : decoder_(std::make_unique<KvChunkDecoder>(config, std::move(limits))) {}

  void Drop(const absl::Status& why) override {
    absl::MutexLock lock(&mu_);
    if (decoder_ == nullptr) return;
    decoder_.reset();
    dropped_ = why;
  }

  absl::Status Accept(const KvChunk& chunk) {
    absl::MutexLock lock(&mu_);
    if (decoder_ == nullptr) return dropped_;
    return decoder_->Accept(chunk);
  }

  // The assembled K/V and the commit's first token; the buffers are empty
  // afterwards.
  absl::StatusOr<KvHandoffState> Finish(uint32_t* first_token) {
    absl::MutexLock lock(&mu_);
    if (decoder_ == nullptr) return dropped_;
    absl::StatusOr<KvHandoffState> state = decoder_->Finish();
    *first_token = decoder_->first_token();
    decoder_.reset();  // the state owns the tensors now
    return state;
  }

 private:
  absl::Mutex mu_;
  std::unique_ptr<KvChunkDecoder> decoder_ ABSL_GUARDED_BY(mu_);
  absl::Status dropped_ ABSL_GUARDED_BY(mu_);  // why the decoder is gone
};

absl::StatusOr<std::unique_ptr<ChunkReceiveSession>> ChunkReceiveSession::Begin(KvReceiver* receiver) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvReceiveSession> session, receiver->BeginReceive());
  auto buffers = std::make_shared<Buffers>(receiver->receive_config(), receiver->receive_limits());
  return std::unique_ptr<ChunkReceiveSession>(new ChunkReceiveSession(std::move(session), std::move(buffers)));
}

ChunkReceiveSession::ChunkReceiveSession(std::unique_ptr<KvReceiveSession> session, std::shared_ptr<Buffers> buffers)
    : session_(std::move(session)), buffers_(std::move(buffers)) {}

ChunkReceiveSession::~ChunkReceiveSession() {
  if (!ended_) AbortReceive(absl::CancelledError("the hand-off stream ended without a commit"));
}

absl::Status ChunkReceiveSession::ReceiveChunk(const KvChunk& chunk) {
  if (bound_) {
    session_->ReceiveProgress();
    if (chunk.has_progress()) return absl::OkStatus();  // a heartbeat, no K/V
    return buffers_->Accept(chunk);
  }
  if (chunk.body_case() != KvChunk::kHeader) {
    return absl::FailedPreconditionError("KV hand-off rejected: the first chunk is not a header");
  }
  // The receiver binds the request before the header's own checks count:
  // a hand-off for no admission is NotFound whatever it carries, and one
  // for an admitted request fails that request.
  const absl::Status checked = buffers_->Accept(chunk);
  RETURN_IF_ERROR(session_->ReceiveHeader(KvHeaderFromWire(chunk.header()), buffers_));
  bound_ = true;
  return checked;
}

absl::StatusOr<KvHandoffAck> ChunkReceiveSession::FinishReceive() {
  uint32_t first_token = 0;
  absl::StatusOr<KvHandoffState> state = buffers_->Finish(&first_token);
  if (!state.ok()) {
    AbortReceive(state.status());
    return state.status();
  }
  ended_ = true;
  return session_->FinishReceive(std::move(*state), first_token);
}

void ChunkReceiveSession::AbortReceive(const absl::Status& why) {
  if (ended_) return;
  ended_ = true;
  buffers_->Drop(why);
  session_->AbortReceive(why);
}

}  // namespace pdserve
