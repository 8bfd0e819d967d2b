#include "decode_service/decode_service.h"

#include "absl/synchronization/mutex.h"
#include "common/handoff/grpc_kv_receiver.h"
#include "common/net/grpc_status.h"
#include "common/net/queued_writer.h"
#include "common/net/sampling_validation.h"

namespace pdserve {
namespace {

using internal::v1::DecodeResponse;

pdserve::v1::FinishReason ToProto(FinishReason finish) {
  switch (finish) {
    case FinishReason::kLength: return pdserve::v1::FINISH_REASON_LENGTH;
    case FinishReason::kEos: return pdserve::v1::FINISH_REASON_EOS;
    case FinishReason::kNone: break;
  }
  return pdserve::v1::FINISH_REASON_UNSPECIFIED;
}

// The Decode stream: the scheduler's TokenSink on one side, a QueuedWriter
// on the other. When the router goes away, the sequence this stream
// admitted (and only that one) is dropped.
class DecodeReactor final : public QueuedWriter<DecodeResponse>, public TokenSink {
 public:
  explicit DecodeReactor(BatchScheduler* scheduler) : scheduler_(scheduler) {}

  // After a successful Admit. A stream that already went has its request
  // cancelled here.
  void SetAdmission(RequestHandle handle) {
    bool gone;
    {
      absl::MutexLock lock(&mu_);
      handle_ = std::move(handle);
      admitted_ = true;
      gone = gone_;
    }
    if (gone) scheduler_->Cancel(handle_);
  }

  // Sends the `admitted` message once, before any token: a local prefill
  // can emit tokens from the scheduler's thread before Admit has returned
  // here, and the router ignores everything that precedes `admitted`.
  bool AnnounceAdmission() {
    absl::MutexLock lock(&announce_mu_);
    if (announced_) return true;
    announced_ = true;
    DecodeResponse admitted;
    admitted.set_admitted(true);
    return Send(std::move(admitted));
  }

  void OnTokens(const std::vector<uint32_t>& ids, FinishReason finish) override {
    AnnounceAdmission();
    DecodeResponse r;
    for (uint32_t id : ids) r.add_token_ids(id);
    r.set_finish_reason(ToProto(finish));
    if (!Send(std::move(r))) {
      CancelAdmission();
      return;
    }
    if (finish != FinishReason::kNone) Close(grpc::Status::OK);
  }

  void OnError(const absl::Status& status) override {
    const std::string side = FailedSide(status);
    Close(ToGrpcStatus(status), side.empty() ? "" : kFailedSideKey, side);
  }

 private:
  void OnStreamGone() override {
    {
      absl::MutexLock lock(&mu_);
      gone_ = true;
    }
    CancelAdmission();
  }

  void CancelAdmission() {
    RequestHandle h;
    {
      absl::MutexLock lock(&mu_);
      if (!admitted_) return;
      h = handle_;
    }
    scheduler_->Cancel(h);
  }

  BatchScheduler* scheduler_;
  absl::Mutex mu_;
  bool admitted_ ABSL_GUARDED_BY(mu_) = false;
  // Orders `admitted` before the first token (never held by gRPC callbacks).
  absl::Mutex announce_mu_;
  bool announced_ ABSL_GUARDED_BY(announce_mu_) = false;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
  RequestHandle handle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<DecodeResponse>* DecodeService::Decode(grpc::CallbackServerContext* context,
                                                                const internal::v1::DecodeRequest* request) {
  auto reactor = QueuedWriter<DecodeResponse>::Create<DecodeReactor>(scheduler_);
  reactor->BindContext(context);
  AdmitRequest admit;
  admit.request_id = request->request_id();
  admit.prompt_len = static_cast<int64_t>(request->prompt_len());
  admit.max_new_tokens = request->max_new_tokens();
  admit.ignore_eos = request->ignore_eos();
  if (request->prefill_locally()) {
    admit.local_prompt.assign(request->prompt_token_ids().begin(), request->prompt_token_ids().end());
    if (admit.local_prompt.empty()) {
      reactor->Close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prefill_locally without prompt_token_ids"));
      return reactor.get();
    }
    absl::Status valid = ValidateSampling(request->sampling(), "sampling");
    if (!valid.ok()) {
      reactor->Close(ToGrpcStatus(valid));
      return reactor.get();
    }
    admit.sampling = SamplingFromProto(request->sampling());
  }
  absl::StatusOr<RequestHandle> handle = scheduler_->Admit(admit, reactor);
  if (!handle.ok()) {
    reactor->Close(ToGrpcStatus(handle.status()));
  } else {
    reactor->SetAdmission(std::move(*handle));
    reactor->AnnounceAdmission();
  }
  return reactor.get();
}

grpc::ServerReadReactor<internal::v1::KvChunk>* DecodeService::PushKv(grpc::CallbackServerContext* context,
                                                                      internal::v1::PushKvResponse* response) {
  return NewPushKvReactor(context, scheduler_, response, nccl_);
}

grpc::ServerUnaryReactor* DecodeService::GetLoad(grpc::CallbackServerContext* context,
                                                 const internal::v1::GetLoadRequest* request,
                                                 internal::v1::GetLoadResponse* response) {
  const SchedulerLoad load = scheduler_->Load();
  response->set_active_sequences(static_cast<uint32_t>(load.active_sequences));
  response->set_queued_requests(static_cast<uint32_t>(load.queued_requests));
  response->set_kv_bytes_used(static_cast<uint64_t>(load.kv_bytes_used));
  response->set_kv_bytes_free(static_cast<uint64_t>(load.kv_bytes_free));
  response->set_kv_bytes_allocated(static_cast<uint64_t>(load.kv_bytes_allocated));
  response->set_last_batch_size(static_cast<uint32_t>(load.last_batch_size));
  response->set_max_batch_size(static_cast<uint32_t>(load.max_batch_size));
  response->set_decode_steps(static_cast<uint64_t>(load.decode_steps));
  response->set_model_fingerprint(scheduler_->model_fingerprint());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* DecodeService::NcclConnect(grpc::CallbackServerContext* context,
                                                     const internal::v1::NcclConnectRequest* request,
                                                     internal::v1::NcclConnectResponse* response) {
  // Joining the communicator happens on its own thread: this answers now.
  *response = AnswerNcclConnect(nccl_, *request);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve
