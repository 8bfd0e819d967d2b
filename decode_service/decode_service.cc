#include "decode_service/decode_service.h"

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/handoff/grpc_kv_receiver.h"
#include "common/net/grpc_status.h"
#include "common/net/queued_writer.h"
#include "common/net/request_tags.h"
#include "common/net/sampling_validation.h"
#include "common/util/clock.h"

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
// admitted (and only that one) is dropped. Its request line is logged when
// the last reference goes (common/net/request_tags.h).
class DecodeReactor final : public QueuedWriter<DecodeResponse>, public TokenSink {
 public:
  DecodeReactor(BatchScheduler* scheduler, RequestTags tags, const internal::v1::DecodeRequest& request)
      : scheduler_(scheduler),
        tags_(std::move(tags)),
        worker_request_id_(request.request_id()),
        prompt_len_(request.prompt_len()),
        local_prefill_(request.prefill_locally()),
        start_ns_(NowNs()) {}
  ~DecodeReactor() override {
    if (log::RequestLines()) LogRequest();
  }

  // Closes the stream with `status`; the first status ends the request's line.
  void End(const grpc::Status& status, const Trailers& trailers = {}) {
    Ended(status);
    Close(status, trailers);
  }

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
    {
      absl::MutexLock lock(&mu_);
      generated_ += static_cast<int64_t>(ids.size());
      if (finish != FinishReason::kNone) finish_ = finish;
    }
    DecodeResponse r;
    for (uint32_t id : ids) r.add_token_ids(id);
    r.set_finish_reason(ToProto(finish));
    if (!Send(std::move(r))) {
      CancelAdmission();
      return;
    }
    if (finish != FinishReason::kNone) End(grpc::Status::OK);
  }

  void OnError(const absl::Status& status) override {
    End(ToGrpcStatus(status), MarkTrailers(status));
  }

 private:
  void OnStreamGone() override {
    {
      absl::MutexLock lock(&mu_);
      gone_ = true;
    }
    Ended(grpc::Status(grpc::StatusCode::CANCELLED, "the router went away"));
    CancelAdmission();
  }

  // Records the request's status and end time, once.
  void Ended(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (end_ns_ != 0) return;
    status_ = status;
    end_ns_ = NowNs();
  }

  void LogRequest() {
    absl::MutexLock lock(&mu_);
    const int64_t e2e_ns = (end_ns_ != 0 ? end_ns_ : NowNs()) - start_ns_;
    const char* finish = finish_ == FinishReason::kLength ? "length" : finish_ == FinishReason::kEos ? "eos" : "";
    LogWorkerRequest(tags_, worker_request_id_, end_ns_ != 0 ? status_ : grpc::Status::CANCELLED,
                     absl::StrFormat("prompt %d%s, generated %d, e2e %.1f ms", prompt_len_,
                                     local_prefill_ ? " (prefilled here)" : "", generated_, e2e_ns * 1e-6),
                     {{"prompt_tokens", prompt_len_},
                      {"generated_tokens", generated_},
                      {"e2e_ms", log::Millis(e2e_ns)},
                      {"local_prefill", local_prefill_},
                      {"finish_reason", finish}});
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
  const RequestTags tags_;
  const std::string worker_request_id_;
  const int64_t prompt_len_;
  const bool local_prefill_;
  const int64_t start_ns_;
  absl::Mutex mu_;
  int64_t generated_ ABSL_GUARDED_BY(mu_) = 0;
  FinishReason finish_ ABSL_GUARDED_BY(mu_) = FinishReason::kNone;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  int64_t end_ns_ ABSL_GUARDED_BY(mu_) = 0;  // when the request ended (Ended)
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
  auto reactor =
      QueuedWriter<DecodeResponse>::Create<DecodeReactor>(scheduler_, RequestTags::FromMetadata(*context), *request);
  reactor->BindContext(context);
  AdmitRequest admit;
  admit.request_id = request->request_id();
  admit.prompt_len = static_cast<int64_t>(request->prompt_len());
  admit.max_new_tokens = request->max_new_tokens();
  admit.ignore_eos = request->ignore_eos();
  if (request->prefill_locally()) {
    admit.local_prompt.assign(request->prompt_token_ids().begin(), request->prompt_token_ids().end());
    if (admit.local_prompt.empty()) {
      reactor->End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prefill_locally without prompt_token_ids"));
      return reactor.get();
    }
    absl::Status valid = ValidateSampling(request->sampling(), "sampling");
    if (!valid.ok()) {
      reactor->End(ToGrpcStatus(valid));
      return reactor.get();
    }
    admit.sampling = SamplingFromProto(request->sampling());
  }
  absl::StatusOr<RequestHandle> handle = scheduler_->Admit(admit, reactor);
  if (!handle.ok()) {
    reactor->End(ToGrpcStatus(handle.status()));
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
