#include "common/handoff/grpc_kv_receiver.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/handoff/chunk_receive_session.h"
#include "common/net/grpc_status.h"

namespace pdserve {
namespace {

using internal::v1::KvChunk;

class PushKvReactor final : public grpc::ServerReadReactor<KvChunk> {
 public:
  PushKvReactor(grpc::CallbackServerContext* context, KvReceiver* receiver, internal::v1::PushKvResponse* response,
                NcclKvReceiver* nccl)
      : context_(context), response_(response), nccl_(nccl) {
    auto session = ChunkReceiveSession::Begin(receiver);
    if (!session.ok()) {
      Finish(ToGrpcStatus(session.status()));
      return;
    }
    session_ = std::move(*session);
    StartRead(&chunk_);
  }

  // Validation is a memcpy and a CRC per chunk: cheap enough for the
  // reactor thread, so no hop to an executor. A payload over NCCL is the
  // exception: its communicator's thread receives it and goes on from there.
  void OnReadDone(bool ok) override {
    if (!ok) {
      if (context_->IsCancelled()) {
        // The sender died or gave up: UNAVAILABLE for the request (another
        // prefill worker may succeed), marked as the prefill side's failure.
        Fail(MarkFailedSide(absl::UnavailableError("KV hand-off: the prefill worker's stream broke"), "prefill"),
             grpc::Status(grpc::StatusCode::CANCELLED, "hand-off stream cancelled"));
        return;
      }
      auto ack = session_->FinishReceive();
      if (!ack.ok()) {
        Fail(ack.status(), ToGrpcStatus(ack.status()));
        return;
      }
      response_->set_received_bytes(static_cast<uint64_t>(ack->received_bytes));
      Finish(grpc::Status::OK);
      return;
    }
    if (chunk_.has_header() && !chunk_.header().nccl_comm_id().empty()) {
      const std::string& id = chunk_.header().nccl_comm_id();
      if (nccl_ == nullptr || !nccl_->Has(id)) {
        Reject(UnknownNcclCommError(id));
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      comm_id_ = id;
    }
    if (chunk_.has_data() && chunk_.data().nccl_bytes() > 0) {
      const std::string id = comm_id();
      if (id.empty()) {
        Reject(absl::FailedPreconditionError(absl::StrCat("KV hand-off rejected: chunk ", chunk_.seq(),
                                                          " carries its payload over NCCL but the header names no "
                                                          "communicator")));
        return;
      }
      absl::Status st = nccl_->ReceivePayload(id, &chunk_, [this](absl::Status received) {
        if (received.ok()) {
          Accept();
        } else {
          Reject(received);
        }
      });
      if (!st.ok()) Reject(st);
      return;
    }
    Accept();
  }

  // A cancelled stream may leave a NCCL receive waiting for bytes that
  // will not come: dropping the communicator ends it (and Reject follows).
  void OnCancel() override {
    const std::string id = comm_id();
    if (!id.empty()) nccl_->Drop(id, absl::CancelledError("the prefill worker's stream broke"));
  }

  void OnDone() override { delete this; }

 private:
  // Hands the chunk to the session, then reads the next one.
  void Accept() {
    absl::Status st = session_->ReceiveChunk(chunk_);
    if (!st.ok()) {
      Reject(st);
      return;
    }
    StartRead(&chunk_);
  }

  void Reject(const absl::Status& why) { Fail(why, ToGrpcStatus(why)); }

  // Ends a failed stream: the session frees what it holds, and a
  // communicator the stream used is dropped (a send or receive of it may be
  // unmatched now).
  void Fail(const absl::Status& why, const grpc::Status& reply) {
    session_->AbortReceive(why);
    const std::string id = comm_id();
    if (!id.empty()) nccl_->Drop(id, why);
    Finish(reply);
  }

  std::string comm_id() {
    std::lock_guard<std::mutex> lock(mu_);
    return comm_id_;
  }

  grpc::CallbackServerContext* context_;
  internal::v1::PushKvResponse* response_;
  NcclKvReceiver* nccl_;
  std::unique_ptr<ChunkReceiveSession> session_;
  KvChunk chunk_;
  std::mutex mu_;        // OnCancel runs on any thread
  std::string comm_id_;  // the header's communicator, once accepted
};

}  // namespace

grpc::ServerReadReactor<KvChunk>* NewPushKvReactor(grpc::CallbackServerContext* context, KvReceiver* receiver,
                                                   internal::v1::PushKvResponse* response, NcclKvReceiver* nccl) {
  return new PushKvReactor(context, receiver, response, nccl);
}

}  // namespace pdserve
