// The transport-neutral half of a KvSendSession: encoding layers into
// chunks, ordering, and the timing of KvTransferStats. Transports implement
// Deliver (hand chunks to the wire) and AwaitAck, and translate the
// domain header to the wire's (KvHeaderToWire) in their StartSend.
#pragma once

#include <cstdint>
#include <vector>

#include "common/handoff/kv_transfer.h"
#include "common/handoff/kv_wire.h"

namespace pdserve {

class ChunkedSendSession : public KvSendSession {
 public:
  ChunkedSendSession(const ModelConfig& config, internal::v1::KvHeader header, int64_t max_chunk_bytes);

  absl::Status SendLayer(int64_t layer, const at::Tensor& k, const at::Tensor& v) final;
  absl::Status SendProgress(int64_t prefilled_tokens) final;
  absl::StatusOr<KvTransferStats> CommitSend(uint32_t first_token) final;

 protected:
  // Sends the header; call once from the transport's StartSend.
  absl::Status Open();
  // Hands chunks to the transport in order. Returns the stream's error once
  // it has one.
  virtual absl::Status Deliver(std::vector<internal::v1::KvChunk> chunks) = 0;
  // Waits for the receiver's acknowledgement after the last chunk.
  virtual absl::StatusOr<KvHandoffAck> AwaitAck() = 0;

  bool finished() const { return finished_; }

 private:
  KvChunkEncoder encoder_;
  KvTransferStats stats_;
  int64_t start_ns_ = 0;
  bool finished_ = false;
};

}  // namespace pdserve
