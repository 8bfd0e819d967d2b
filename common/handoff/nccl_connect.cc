// The NCCL receiver's helpers that every build has, with NCCL or without
// (nccl_kv_receiver.cc, nccl_unavailable.cc): the NcclConnect answer and
// the error for a communicator this worker does not hold.
#include "absl/strings/str_cat.h"
#include "common/handoff/nccl_kv_receiver.h"

namespace pdserve {

absl::Status UnknownNcclCommError(const std::string& comm_id) {
  return absl::FailedPreconditionError(
      absl::StrCat("KV hand-off names NCCL communicator ", comm_id,
                   ", which this decode worker does not hold (it runs --kv-transport grpc, or the communicator "
                   "failed, was replaced, or the worker restarted); the prefill worker connects anew on its next "
                   "hand-off"));
}

internal::v1::NcclConnectResponse AnswerNcclConnect(NcclKvReceiver* receiver,
                                                    const internal::v1::NcclConnectRequest& request) {
  if (receiver != nullptr) return receiver->Connect(request);
  internal::v1::NcclConnectResponse r;
  r.set_reason("the decode worker runs --kv-transport grpc");
  return r;
}

}  // namespace pdserve
