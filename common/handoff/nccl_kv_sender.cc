// The NCCL transport. Control stays on the PushKv stream (GrpcSendSession):
// header, chunk metadata, commit, acknowledgement, errors. Each data
// chunk's payload goes over a 2-rank NCCL communicator per prefill/decode
// pair (this worker rank 0), formed once through DecodeWorker.NcclConnect
// and cached. A pair that cannot form one uses plain gRPC and says so once.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/handoff/grpc_send_session.h"
#include "common/handoff/kv_transports.h"
#include "common/handoff/nccl_comm.h"
#include "common/util/log.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {

using internal::v1::DecodeWorker;
using internal::v1::KvChunk;

// How long a pair that failed to connect (not refused) uses gRPC before it
// tries again.
constexpr absl::Duration kRetryAfter = absl::Seconds(60);
constexpr int kDevice = 0;  // the pod's one GPU (CUDA_VISIBLE_DEVICES picks it)

// One decode worker's communicator. Hand-offs use it one at a time, so that
// NCCL's send order is the stream's chunk order; the fields are touched
// only by the holder of the pair.
struct NcclPair {
  // False when another hand-off holds the pair.
  bool TryAcquire() {
    bool idle = false;
    return busy.compare_exchange_strong(idle, true);
  }
  void Release() { busy = false; }

  std::atomic<bool> busy{false};
  std::shared_ptr<NcclComm> comm;
  std::string comm_id;
  std::string reason;    // why the pair uses gRPC (logged when it changes)
  bool refused = false;  // for good: the decode worker or this one said no
  absl::Time retry_after = absl::InfinitePast();
};

class NcclSendSession final : public GrpcSendSession {
 public:
  NcclSendSession(const ModelConfig& config, internal::v1::KvHeader header, const KvSenderOptions& options,
                  std::shared_ptr<grpc::Channel> channel, absl::Time deadline, std::string address,
                  std::shared_ptr<NcclPair> pair)
      : GrpcSendSession(config, std::move(header), options, std::move(channel), deadline, std::move(address)),
        stall_timeout_(options.nccl_stall_timeout),
        pair_(std::move(pair)),
        comm_(pair_->comm) {}

  ~NcclSendSession() override {
    CancelSend();  // joins the writer thread, which calls the hooks below
    if (pair_ != nullptr) pair_->Release();
  }

 protected:
  // The chunk's metadata first: the receiver posts its ncclRecv when the
  // chunk arrives, so the send below finds it.
  bool WriteChunk(KvChunk& chunk, absl::Status* local_error) override {
    if (!chunk.has_data() || chunk.data().payload().empty()) return WriteToStream(chunk);
    std::string payload = std::move(*chunk.mutable_data()->mutable_payload());
    chunk.mutable_data()->clear_payload();
    chunk.mutable_data()->set_nccl_bytes(payload.size());
    if (!WriteToStream(chunk)) return false;
    absl::Status st =
        comm_->Send(payload.data(), payload.size(), std::min(deadline(), absl::Now() + stall_timeout_), cancel_flag());
    if (!st.ok()) {
      *local_error = absl::Status(st.code(), absl::StrCat("NCCL hand-off to ", address(), ": ", st.message()));
      return false;
    }
    return true;
  }

  // A failed or cancelled stream may leave a send unmatched, which would
  // pair with the next hand-off's receive, and the receiver drops the
  // communicator too: abort it.
  void OnStreamDone(const absl::Status& status) override {
    if (!status.ok() && pair_->comm == comm_) {
      log::Warn(absl::StrCat("kv hand-off to ", address(), ": NCCL communicator ", pair_->comm_id,
                             " dropped after a failed hand-off (", status.message(), ")"),
                {}, log::TextPrefix::None());
      pair_->comm.reset();
      pair_->comm_id.clear();
    }
    comm_.reset();
    pair_->Release();
    pair_.reset();
  }

 private:
  const absl::Duration stall_timeout_;
  std::shared_ptr<NcclPair> pair_;  // held (busy) until the stream is done
  std::shared_ptr<NcclComm> comm_;
};

std::string MakeSenderId() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return absl::StrCat(host, ":", ::getpid(), ":", absl::Hex(rd()));
}

class NcclKvSender final : public KvSender {
 public:
  NcclKvSender(const ModelConfig& config, const KvSenderOptions& options)
      : config_(config), options_(options), sender_id_(MakeSenderId()), channels_(options.channel_security) {}

  absl::StatusOr<std::unique_ptr<KvSendSession>> StartSend(const std::string& decode_address,
                                                           KvHandoffHeader domain_header,
                                                           absl::Time deadline) override {
    internal::v1::KvHeader header = KvHeaderToWire(domain_header);
    std::shared_ptr<NcclPair> pair = Pair(decode_address);
    std::unique_ptr<GrpcSendSession> session;
    // A pair busy with another hand-off: this one goes over gRPC rather
    // than wait for a whole prefill.
    if (pair->TryAcquire()) {
      if (EnsureComm(*pair, decode_address, deadline)) {
        header.set_nccl_comm_id(pair->comm_id);
        session = std::make_unique<NcclSendSession>(config_, std::move(header), options_, channels_.Get(decode_address),
                                                    deadline, decode_address, pair);
      } else {
        pair->Release();
      }
    }
    if (session == nullptr) {
      session = std::make_unique<GrpcSendSession>(config_, std::move(header), options_, channels_.Get(decode_address),
                                                  deadline, decode_address);
    }
    RETURN_IF_ERROR(session->Start());
    return std::unique_ptr<KvSendSession>(std::move(session));
  }

 private:
  std::shared_ptr<NcclPair> Pair(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& p = pairs_[address];
    if (p == nullptr) p = std::make_shared<NcclPair>();
    return p;
  }

  // True when the pair has a communicator (made now if need be). Otherwise
  // logs why the pair uses gRPC, once per reason.
  bool EnsureComm(NcclPair& pair, const std::string& address, absl::Time deadline) {
    if (pair.comm != nullptr) return true;
    if (pair.refused || absl::Now() < pair.retry_after) return false;
    absl::Status st = Connect(pair, address, deadline);
    if (st.ok()) {
      pair.reason.clear();
      log::Info(absl::StrCat("kv hand-off to ", address, ": NCCL communicator ", pair.comm_id, " ready on CUDA device ",
                             kDevice),
                {}, log::TextPrefix::None());
      return true;
    }
    // FailedPrecondition: a refusal that another try would not change.
    if (st.code() == absl::StatusCode::kFailedPrecondition) {
      pair.refused = true;
    } else {
      pair.retry_after = absl::Now() + kRetryAfter;
    }
    const std::string reason(st.message());
    if (reason != pair.reason) {
      log::Warn(absl::StrCat("kv hand-off to ", address, ": NCCL unavailable (", reason, "); falling back to gRPC"), {},
                log::TextPrefix::None());
      pair.reason = reason;
    }
    return false;
  }

  // Forms the pair's communicator: NcclConnect, then both ranks' init.
  // FailedPrecondition when this worker or the decode worker can't take
  // part; Unavailable (or NCCL's error) when forming it failed.
  absl::Status Connect(NcclPair& pair, const std::string& address, absl::Time deadline) {
    std::string why;
    if (CudaDeviceCount(&why) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("the prefill worker has no CUDA device (", why, ")"));
    }
    ASSIGN_OR_RETURN(std::string unique_id, NewNcclUniqueId());
    const absl::Time connect_deadline = std::min(deadline, absl::Now() + options_.nccl_connect_timeout);
    internal::v1::NcclConnectRequest request;
    request.set_nccl_unique_id(unique_id);
    request.set_comm_id(absl::StrCat(sender_id_, "/", ++connects_));
    request.set_sender_id(sender_id_);
    internal::v1::NcclConnectResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(connect_deadline));
    grpc::Status rpc = DecodeWorker::NewStub(channels_.Get(address))->NcclConnect(&context, request, &response);
    if (rpc.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      return absl::FailedPreconditionError("the decode worker does not implement NcclConnect");
    }
    if (!rpc.ok()) return absl::UnavailableError(absl::StrCat("NcclConnect failed: ", rpc.error_message()));
    if (!response.accepted()) return absl::FailedPreconditionError(response.reason());
    auto comm = NcclComm::Connect(unique_id, /*rank=*/0, kDevice, connect_deadline);
    if (!comm.ok()) return comm.status();
    pair.comm = std::move(*comm);
    pair.comm_id = request.comm_id();
    return absl::OkStatus();
  }

  const ModelConfig config_;
  const KvSenderOptions options_;
  const std::string sender_id_;
  std::atomic<int64_t> connects_{0};
  GrpcChannelCache channels_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<NcclPair>> pairs_;
};

}  // namespace

std::unique_ptr<KvSender> MakeNcclKvSender(const ModelConfig& config, const KvSenderOptions& options) {
  return std::make_unique<NcclKvSender>(config, options);
}

}  // namespace pdserve
