#include "common/handoff/grpc_kv_receiver.h"

#include "common/net/grpc_status.h"

namespace pdserve {
namespace {

using internal::v1::KvChunk;

class PushKvReactor final : public grpc::ServerReadReactor<KvChunk> {
 public:
  PushKvReactor(grpc::CallbackServerContext* context, KvReceiver* receiver, internal::v1::PushKvResponse* response)
      : context_(context), response_(response) {
    auto session = receiver->BeginReceive();
    if (!session.ok()) {
      Finish(ToGrpcStatus(session.status()));
      return;
    }
    session_ = std::move(*session);
    StartRead(&chunk_);
  }

  // Validation is a memcpy and a CRC per chunk: cheap enough for the
  // reactor thread, so no hop to an executor.
  void OnReadDone(bool ok) override {
    if (!ok) {
      if (context_->IsCancelled()) {
        session_->AbortReceive(absl::CancelledError("the prefill worker's stream broke"));
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "hand-off stream cancelled"));
        return;
      }
      auto ack = session_->FinishReceive();
      if (ack.ok()) *response_ = *ack;
      Finish(ToGrpcStatus(ack.status()));
      return;
    }
    absl::Status st = session_->ReceiveChunk(chunk_);
    if (!st.ok()) {
      session_->AbortReceive(st);
      Finish(ToGrpcStatus(st));
      return;
    }
    StartRead(&chunk_);
  }

  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* context_;
  internal::v1::PushKvResponse* response_;
  std::unique_ptr<KvReceiveSession> session_;
  KvChunk chunk_;
};

}  // namespace

grpc::ServerReadReactor<KvChunk>* NewPushKvReactor(grpc::CallbackServerContext* context, KvReceiver* receiver,
                                                    internal::v1::PushKvResponse* response) {
  return new PushKvReactor(context, receiver, response);
}

}  // namespace pdserve
