// The transport-neutral half of receiving a hand-off, shared by every
// transport (the gRPC PushKv reactor, the NCCL transport's control stream,
// the in-process sender): it checks each chunk with a KvChunkDecoder
// against the receiver's model and limits, and feeds the receiver's domain
// KvReceiveSession (kv_transfer.h) the header, progress, and finally the
// layers' tensors with the first token.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "common/handoff/kv_transfer.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

class ChunkReceiveSession {
 public:
  // A session of `receiver`; its BeginReceive's error otherwise.
  static absl::StatusOr<std::unique_ptr<ChunkReceiveSession>> Begin(KvReceiver* receiver);
  // Aborts the receiver's session when neither FinishReceive nor
  // AbortReceive ended it.
  ~ChunkReceiveSession();

  // The next chunk in arrival order. FailedPrecondition (bad chunk, wrong
  // model), ResourceExhausted or NotFound (from the receiver): the
  // transport stops and calls AbortReceive with it.
  absl::Status ReceiveChunk(const internal::v1::KvChunk& chunk);
  // The sender closed the stream: the receiver's acknowledgement, or why
  // the stream was incomplete (the receiver's session is then aborted).
  absl::StatusOr<KvHandoffAck> FinishReceive();
  // The stream broke or was rejected; a no-op once ended.
  void AbortReceive(const absl::Status& why);

 private:
  class Buffers;
  ChunkReceiveSession(std::unique_ptr<KvReceiveSession> session, std::shared_ptr<Buffers> buffers);

  std::unique_ptr<KvReceiveSession> session_;
  std::shared_ptr<Buffers> buffers_;
  bool bound_ = false;  // the receiver took the header
  bool ended_ = false;
};

}  // namespace pdserve
