#include "decode_service/decode_service.h"

#include "common/handoff/grpc_kv_receiver.h"
#include "common/net/grpc_status.h"
#include "common/net/queued_writer.h"

namespace pdserve {
namespace {

using internal::v1::DecodeResponse;

// The Decode stream: the scheduler's TokenSink on one side, a QueuedWriter
// on the other. When the router goes away, the sequence is dropped.
class DecodeReactor final : public QueuedWriter<DecodeResponse>, public TokenSink {
 public:
  DecodeReactor(BatchScheduler* scheduler, std::string request_id)
      : scheduler_(scheduler), request_id_(std::move(request_id)) {}

  void OnTokens(const std::vector<uint32_t>& ids, pdserve::v1::FinishReason finish) override {
    DecodeResponse r;
    for (uint32_t id : ids) r.add_token_ids(id);
    r.set_finish_reason(finish);
    if (!Send(std::move(r))) {
      scheduler_->Cancel(request_id_);
      return;
    }
    if (finish != pdserve::v1::FINISH_REASON_UNSPECIFIED) Close(grpc::Status::OK);
  }

  void OnError(const absl::Status& status) override { Close(ToGrpcStatus(status)); }

 private:
  void OnStreamGone() override { scheduler_->Cancel(request_id_); }

  BatchScheduler* scheduler_;
  const std::string request_id_;
};

}  // namespace

grpc::ServerWriteReactor<DecodeResponse>* DecodeService::Decode(grpc::CallbackServerContext* context,
                                                                const internal::v1::DecodeRequest* request) {
  auto reactor = QueuedWriter<DecodeResponse>::Create<DecodeReactor>(scheduler_, request->request_id());
  AdmitRequest admit;
  admit.request_id = request->request_id();
  admit.prompt_len = static_cast<int64_t>(request->prompt_len());
  admit.max_new_tokens = request->max_new_tokens();
  admit.ignore_eos = request->ignore_eos();
  if (request->prefill_locally()) {
    admit.local_prompt.assign(request->prompt_token_ids().begin(), request->prompt_token_ids().end());
    admit.sampling = SamplingFromProto(request->sampling());
    if (admit.local_prompt.empty()) {
      reactor->Close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prefill_locally without prompt_token_ids"));
      return reactor.get();
    }
  }
  absl::Status st = scheduler_->Admit(admit, reactor);
  if (!st.ok()) {
    reactor->Close(ToGrpcStatus(st));
  } else {
    DecodeResponse admitted;
    admitted.set_admitted(true);
    reactor->Send(std::move(admitted));
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
  *response = scheduler_->Load();
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
