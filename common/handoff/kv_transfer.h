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
// KvReceiveSession. Both speak domain types (KvHandoffHeader, the layers'
// tensors, KvHandoffAck), like TensorRT-LLM's cache transceiver; each
// transport translates at its edge, and all of them move the chunks of
// kv_wire.h (chunked_send_session.h, chunk_receive_session.h), so every
// transport validates the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/kv/handoff_state.h"
#include "common/kv/mixed_kv_cache.h"
#include "common/model/config.h"
#include "common/model/sampling_params.h"
#include "common/net/server.h"

namespace pdserve {

inline constexpr int64_t kMaxKvChunkBytes = 4 << 20;

// ---- What a hand-off carries (the transports translate it to their wire) ----

// The K/V layout both sides must agree on: the model (by fingerprint) and
// the cache's shape. Even layers are windowed (ModelConfig::IsWindowed).
struct KvHandoffLayout {
  std::string model_fingerprint;
  int64_t n_layers = 0;
  int64_t window = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  KvDtype dtype = KvDtype::kF32;

  // `config`'s layout, for K/V in `dtype`.
  static KvHandoffLayout Of(const ModelConfig& config, KvDtype dtype, std::string model_fingerprint);
  // Rows layer `layer` carries for a prompt of `prompt_len` tokens.
  int64_t Rows(int64_t layer, int64_t prompt_len) const;
};

// Opens a hand-off: which request, what it carries, and how the decode
// side goes on sampling.
struct KvHandoffHeader {
  std::string request_id;
  KvHandoffLayout layout;
  int64_t prompt_len = 0;
  SamplingParams sampling;
  // The payload's size: filled in by the sending transport; on the
  // receiving side, as the sender declared it.
  int64_t total_bytes = 0;
};

// The receiver's acknowledgement: it owns the K/V now.
struct KvHandoffAck {
  int64_t received_bytes = 0;
};

// What a receiver accepts (every transport checks each chunk against it,
// kv_wire.h).
struct KvReceiveLimits {
  std::string model_fingerprint;  // must match the header's
  int64_t max_prompt_len = 131072;
  int64_t max_total_bytes = int64_t{8} << 30;
  int64_t max_chunk_bytes = kMaxKvChunkBytes;
};

// What an incoming hand-off holds while it arrives (the K/V received so
// far). The transport fills it; the receiver may drop it when its request
// ends first, so that the memory goes at once even while the sender
// stalls; the stream's next chunk then fails with `why`. Thread-safe.
// Lock order: the receiver's own lock, then this one.
class KvReceiveBuffers {
 public:
  virtual ~KvReceiveBuffers() = default;
  virtual void Drop(const absl::Status& why) = 0;
};

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

// One incoming hand-off, in domain terms: the transport decodes and checks
// the chunks (the same way for every transport, kv_wire.h) and calls
// ReceiveHeader first, ReceiveProgress for every later chunk, then exactly
// one of FinishReceive (complete and valid) or AbortReceive (rejected or
// broken). The session must free everything it holds on either.
class KvReceiveSession {
 public:
  virtual ~KvReceiveSession() = default;
  // Binds the hand-off to its request. `header` is as the sender declared
  // it: the transport checks it against this receiver's model and limits
  // right after, and aborts the session when it fails. NotFound (no
  // admitted request) or FailedPrecondition (it does not fit the
  // admission): the transport stops and reports it to the sender.
  // `buffers`: what the hand-off holds, for the receiver to drop.
  virtual absl::Status ReceiveHeader(const KvHandoffHeader& header, std::shared_ptr<KvReceiveBuffers> buffers) = 0;
  // A later chunk arrived (data, progress or the commit): the sender is
  // alive.
  virtual void ReceiveProgress() = 0;
  // The complete K/V and the first token; the receiver owns them after its
  // acknowledgement.
  virtual absl::StatusOr<KvHandoffAck> FinishReceive(KvHandoffState state, uint32_t first_token) = 0;
  virtual void AbortReceive(const absl::Status& why) = 0;
};

class KvReceiver {
 public:
  virtual ~KvReceiver() = default;
  // A session for one incoming stream. Unavailable when shutting down.
  virtual absl::StatusOr<std::unique_ptr<KvReceiveSession>> BeginReceive() = 0;
  // What every chunk of a hand-off is checked against.
  virtual const ModelConfig& receive_config() const = 0;
  virtual KvReceiveLimits receive_limits() const = 0;
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
  // header (request id, layout, prompt_len, sampling; total_bytes is filled
  // in). Unavailable when the address is unknown or unreachable.
  virtual absl::StatusOr<std::unique_ptr<KvSendSession>> StartSend(const std::string& decode_address,
                                                                    KvHandoffHeader header,
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
  // How the prefill worker dials decode workers (mTLS when TLS is on).
  ChannelSecurity channel_security;
};

std::unique_ptr<KvSender> MakeKvSender(KvTransport transport, const ModelConfig& config,
                                       const KvSenderOptions& options = {});

}  // namespace pdserve
