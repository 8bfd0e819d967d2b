// The KV hand-off on the wire: a KvHandoffState split into a header and
// bounded (<= 4 MiB), numbered, CRC-32C-checksummed chunks, layer by layer
// (pdserve.internal.v1.KvChunk), and the receiving side that validates every
// declared size before it allocates anything.
//
// Transport-neutral: the gRPC, NCCL and in-process hand-offs all move these
// chunks. Also the header's translation between the domain
// (KvHandoffHeader, kv_transfer.h) and the wire.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "common/handoff/kv_transfer.h"
#include "common/kv/handoff_state.h"
#include "common/model/config.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

// Rows a layer carries for a prompt of `prompt_len` tokens.
int64_t HandoffRows(const ModelConfig& config, int64_t layer, int64_t prompt_len);

// The header on the wire and back. FromWire takes the sender's values as
// they are (KvChunkDecoder checks them); a dtype this build does not know
// reads as kF32, and the decoder rejects it.
internal::v1::KvHeader KvHeaderToWire(const KvHandoffHeader& header);
KvHandoffHeader KvHeaderFromWire(const internal::v1::KvHeader& header);

// Sender side. Fills in the header's sizes (n_chunks, total_bytes, model
// dims) from `config`, so callers set only request id, fingerprint, dtype,
// prompt_len and sampling. The stream is Header(), Layer(0..L-1), Commit().
class KvChunkEncoder {
 public:
  KvChunkEncoder(const ModelConfig& config, internal::v1::KvHeader header,
                 int64_t max_chunk_bytes = kMaxKvChunkBytes);

  // Chunk 0.
  internal::v1::KvChunk Header() const;
  // The chunks of one layer (K then V, [rows, K, d] in time order, in the
  // header's dtype). InvalidArgument when the shape or dtype is wrong or
  // layers come out of order.
  absl::StatusOr<std::vector<internal::v1::KvChunk>> Layer(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  // The closing chunk with the first token. FailedPrecondition before the
  // last layer.
  absl::StatusOr<internal::v1::KvChunk> Commit(uint32_t first_token);

  const internal::v1::KvHeader& header() const { return header_; }

 private:
  const ModelConfig config_;
  internal::v1::KvHeader header_;
  int64_t max_chunk_bytes_;
  uint32_t next_seq_ = 1;
  int64_t next_layer_ = 0;
};

// Receiver side: Accept() chunks in order, then Finish().
class KvChunkDecoder {
 public:
  KvChunkDecoder(const ModelConfig& config, KvReceiveLimits limits);

  // FailedPrecondition with a sentence naming the problem: wrong
  // fingerprint or model dims, sizes beyond the limits, a chunk out of
  // order, duplicated, truncated, of the wrong layer/offset, or failing its
  // checksum. Nothing is allocated before the header passes.
  absl::Status Accept(const internal::v1::KvChunk& chunk);

  // The assembled state. FailedPrecondition when chunks or the commit are
  // missing.
  absl::StatusOr<KvHandoffState> Finish();

  bool has_header() const { return has_header_; }
  bool committed() const { return committed_; }
  // From the commit chunk.
  uint32_t first_token() const { return first_token_; }
  const internal::v1::KvHeader& header() const { return header_; }
  int64_t received_bytes() const { return received_bytes_; }

 private:
  absl::Status AcceptHeader(const internal::v1::KvChunk& chunk);
  absl::Status AcceptData(const internal::v1::KvChunk& chunk);
  absl::Status AcceptCommit(const internal::v1::KvChunk& chunk);

  const ModelConfig config_;
  KvReceiveLimits limits_;
  internal::v1::KvHeader header_;
  bool has_header_ = false;
  bool committed_ = false;
  uint32_t first_token_ = 0;
  uint32_t next_seq_ = 0;
  int64_t elem_bytes_ = 0;
  // Expected position: layer, tensor (0 = K, 1 = V), byte offset.
  int64_t layer_ = 0, tensor_ = 0, offset_ = 0;
  int64_t received_bytes_ = 0;
  std::vector<at::Tensor> k_, v_;
};

}  // namespace pdserve
