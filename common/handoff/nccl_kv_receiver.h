// The decode worker's side of the NCCL hand-off: the communicators that
// prefill workers opened with DecodeWorker.NcclConnect, by id, each with
// its own thread that receives payloads in chunk order. The PushKv reactor
// (grpc_kv_receiver.h) hands it the data chunks whose payload travels over
// NCCL. No NCCL or CUDA headers here: a build without NCCL gets a receiver
// that refuses every connect.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/handoff/kv_wire.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

struct NcclReceiverOptions {
  // How long a connect may take to form the communicator.
  absl::Duration init_timeout = absl::Seconds(30);
  // How long one payload may take to arrive once its chunk did (the sender
  // sends right after the chunk, so this only bounds a dead peer).
  absl::Duration stall_timeout = absl::Seconds(10);
  // Communicators held at once (one per prefill worker); more are refused.
  int max_peers = 64;
  // Largest payload accepted over NCCL (the device staging buffer's size).
  int64_t max_chunk_bytes = kMaxKvChunkBytes;
  int device = 0;  // CUDA device (the pod's one GPU)
};

class NcclKvReceiver {
 public:
  virtual ~NcclKvReceiver() = default;

  // Answers NcclConnect: accepted, with this worker then joining the
  // communicator as rank 1 on the communicator's thread, or refused with a
  // reason (no CUDA device, built without NCCL, too many peers, bad id).
  virtual internal::v1::NcclConnectResponse Connect(const internal::v1::NcclConnectRequest& request) = 0;

  // True while communicator `comm_id` is usable (joining or joined).
  virtual bool Has(const std::string& comm_id) = 0;

  // Receives chunk->data().nccl_bytes() bytes on `comm_id` into the
  // chunk's payload, on that communicator's thread, after the payloads
  // handed over before; then calls `done` there with OK or the error
  // (which has dropped the communicator). Returns FailedPrecondition,
  // without calling `done`, when the communicator is unknown or the size is
  // beyond the limit.
  virtual absl::Status ReceivePayload(const std::string& comm_id, internal::v1::KvChunk* chunk,
                                      std::function<void(absl::Status)> done) = 0;

  // Aborts and forgets `comm_id` (a failed or cancelled stream may have
  // left a send or receive unmatched). Pending receives end with `why`.
  virtual void Drop(const std::string& comm_id, const absl::Status& why) = 0;
};

// The receiver for --kv-transport nccl. In a build without NCCL it refuses
// every connect ("built without NCCL").
std::unique_ptr<NcclKvReceiver> MakeNcclKvReceiver(const NcclReceiverOptions& options = {});

// DecodeWorker.NcclConnect for a worker that takes NCCL hand-offs through
// `receiver`; refuses when `receiver` is null (--kv-transport grpc).
internal::v1::NcclConnectResponse AnswerNcclConnect(NcclKvReceiver* receiver,
                                                    const internal::v1::NcclConnectRequest& request);

// FailedPrecondition for a hand-off that names a communicator this decode
// worker does not hold.
absl::Status UnknownNcclCommError(const std::string& comm_id);

// Whether this binary was built with the NCCL transport (PDSERVE_HAVE_NCCL).
bool NcclTransportBuilt();

}  // namespace pdserve
