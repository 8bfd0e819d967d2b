#include "common/handoff/chunked_send_session.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/util/clock.h"
#include "common/util/status_macros.h"

namespace pdserve {


ChunkedSendSession::ChunkedSendSession(const ModelConfig& config, internal::v1::KvHeader header,
                                       int64_t max_chunk_bytes)
    : encoder_(config, std::move(header), max_chunk_bytes) {}

absl::Status ChunkedSendSession::Open() {
  std::vector<internal::v1::KvChunk> one;
  one.push_back(encoder_.Header());
  return Deliver(std::move(one));
}

absl::Status ChunkedSendSession::SendLayer(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  if (finished_) return absl::FailedPreconditionError("hand-off already committed");
  ASSIGN_OR_RETURN(std::vector<internal::v1::KvChunk> chunks, encoder_.Layer(layer, k, v));
  if (start_ns_ == 0) start_ns_ = NowNs();
  stats_.chunks += static_cast<int64_t>(chunks.size());
  for (const auto& c : chunks) stats_.bytes += static_cast<int64_t>(c.data().payload().size());
  return Deliver(std::move(chunks));
}

absl::Status ChunkedSendSession::SendProgress(int64_t prefilled_tokens) {
  if (finished_) return absl::FailedPreconditionError("hand-off already committed");
  std::vector<internal::v1::KvChunk> one(1);
  one[0].mutable_progress()->set_prefilled_tokens(static_cast<uint64_t>(prefilled_tokens));
  return Deliver(std::move(one));
}

absl::StatusOr<KvTransferStats> ChunkedSendSession::CommitSend(uint32_t first_token) {
  if (finished_) return absl::FailedPreconditionError("hand-off already committed");
  ASSIGN_OR_RETURN(internal::v1::KvChunk commit, encoder_.Commit(first_token));
  const int64_t tail_start = NowNs();
  std::vector<internal::v1::KvChunk> one;
  one.push_back(std::move(commit));
  RETURN_IF_ERROR(Deliver(std::move(one)));
  ASSIGN_OR_RETURN(KvHandoffAck ack, AwaitAck());
  finished_ = true;
  const int64_t end = NowNs();
  if (ack.received_bytes != stats_.bytes) {
    return absl::DataLossError(absl::StrCat("decode worker acknowledged ", ack.received_bytes, " of ",
                                            stats_.bytes, " hand-off bytes"));
  }
  stats_.elapsed_ns = end - start_ns_;
  stats_.tail_ns = end - tail_start;
  return stats_;
}

}  // namespace pdserve
