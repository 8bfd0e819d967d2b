// The KV hand-off between a prefill worker (sender) and a decode worker
// (receiver), behind one interface with several transports:
//   kGrpc       the PushKv client stream (different processes or hosts);
//   kInProcess  direct calls into a receiver in the same process (tests,
//               the single-process local stack);
//   kNccl       the PushKv stream for control and chunk metadata, the
//               payloads GPU to GPU over a cached 2-rank NCCL communicator
//               per pair (nccl_kv_sender.cc); a pair that can't form one
//               falls back to gRPC.
// Method names say which side acts: the prefill worker calls KvSender /
// KvSendSession, the transport calls the decode worker's KvReceiver /
// KvReceiveSession. Both sides move the chunks of kv_wire.h, so every
// transport gets the same validation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model/config.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

// What one hand-off cost, as the sender saw it.
struct KvTransferStats {
  int64_t bytes = 0;       // payload bytes sent (= header total_bytes)
  int64_t chunks = 0;      // data chunks sent
  // From the first data chunk (layer 0 of the last prefill chunk) to the
  // receiver's acknowledgement: the hand-off's wall time, overlapping the
  // rest of prefill.
  int64_t elapsed_ns = 0;
  // From the commit (sent once the first token is sampled) to the
  // acknowledgement: the part of the hand-off prefill did not hide.
  int64_t tail_ns = 0;
};

// ---- Receiving side (implemented by the decode worker) ----

// One incoming hand-off. The transport calls ReceiveChunk for every chunk in
// arrival order, then exactly one of FinishReceive (the sender closed the
// stream) or AbortReceive (it broke). The session must free everything it
// holds on either. KvProgress chunks may come between any two chunks after
// the header; they carry no K/V and are not in the seq order.
class KvReceiveSession {
 public:
  virtual ~KvReceiveSession() = default;
  // FailedPrecondition (bad chunk, wrong model), ResourceExhausted (no room)
  // or NotFound (no admitted request): the transport stops and reports it to
  // the sender.
  virtual absl::Status ReceiveChunk(const internal::v1::KvChunk& chunk) = 0;
  // The acknowledgement, after which the receiver owns the K/V; an error
  // when the stream was incomplete.
  virtual absl::StatusOr<internal::v1::PushKvResponse> FinishReceive() = 0;
  virtual void AbortReceive(const absl::Status& why) = 0;
};

class KvReceiver {
 public:
  virtual ~KvReceiver() = default;
  // A session for one incoming stream. Unavailable when shutting down.
  virtual absl::StatusOr<std::unique_ptr<KvReceiveSession>> BeginReceive() = 0;
};

// ---- Sending side (used by the prefill worker) ----

// One outgoing hand-off: header at start, then layers in order, then the
// commit. Not thread-safe; one caller drives it.
class KvSendSession {
 public:
  virtual ~KvSendSession() = default;
  // Queues one layer's rows ([rows, K, d] in the header's dtype). Returns
  // quickly; the transport moves the bytes in the background. An error when
  // the receiver already rejected the stream (its status).
  virtual absl::Status SendLayer(int64_t layer, const at::Tensor& k, const at::Tensor& v) = 0;
  // Tells the receiver the prefill is alive (a KvProgress chunk) so that
  // its hand-off timeout restarts. An error when the receiver already
  // rejected the stream.
  virtual absl::Status SendProgress(int64_t prefilled_tokens) = 0;
  // Sends the commit with the first token and waits for the acknowledgement.
  // Returns the receiver's status when it rejected the stream, Unavailable
  // when the transport broke, DeadlineExceeded past the deadline.
  virtual absl::StatusOr<KvTransferStats> CommitSend(uint32_t first_token) = 0;
  // Abandons the stream (prefill failed or was cancelled); the receiver sees
  // an aborted stream and frees what it holds. Safe to call more than once.
  virtual void CancelSend() = 0;
};

class KvSender {
 public:
  virtual ~KvSender() = default;
  // Opens a hand-off to the decode worker at `decode_address` and sends the
  // header (request id, fingerprint, dtype, prompt_len, sampling; sizes are
  // filled in from the config). Unavailable when the address is unknown or
  // unreachable.
  virtual absl::StatusOr<std::unique_ptr<KvSendSession>> StartSend(const std::string& decode_address,
                                                                    internal::v1::KvHeader header,
                                                                    absl::Time deadline) = 0;
};

// ---- Factory ----

enum class KvTransport { kGrpc, kInProcess, kNccl };

// "grpc", "inprocess" or "nccl". InvalidArgument naming the value
// otherwise.
absl::StatusOr<KvTransport> ParseKvTransport(const std::string& name);

// Decode workers in this process, by the address they serve on, for the
// in-process transport. Thread-safe.
class InProcessKvRegistry {
 public:
  static InProcessKvRegistry& Global();
  void Register(const std::string& address, KvReceiver* receiver);
  void Unregister(const std::string& address);
  // nullptr when nothing is registered under `address`.
  KvReceiver* Find(const std::string& address) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, KvReceiver*> receivers_ ABSL_GUARDED_BY(mu_);
};

struct KvSenderOptions {
  int64_t max_chunk_bytes = 4 << 20;
  // Chunks the gRPC sender may queue ahead of the wire (bounds the memory a
  // slow receiver can make the prefill worker hold).
  int64_t max_queued_bytes = int64_t{256} << 20;
  InProcessKvRegistry* registry = nullptr;  // kInProcess; nullptr = Global()
  // kNccl: the longest NcclConnect plus communicator init may take, and
  // the longest one payload may wait for the receiver (only a dead or
  // confused peer makes it wait: the communicator is then dropped).
  absl::Duration nccl_connect_timeout = absl::Seconds(30);
  absl::Duration nccl_stall_timeout = absl::Seconds(10);
};

std::unique_ptr<KvSender> MakeKvSender(KvTransport transport, const ModelConfig& config,
                                       const KvSenderOptions& options = {});

}  // namespace pdserve
