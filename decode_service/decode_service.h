// DecodeService: the DecodeWorker gRPC service over a BatchScheduler.
//   Decode  (router)  admits the request against the KV budget, answers
//                     one `admitted` message, then streams its tokens;
//   PushKv  (prefill) the hand-off stream, validated chunk by chunk;
//   GetLoad (router)  active sequences, free KV bytes, batch sizes.
#pragma once

#include "decode_service/batch_scheduler.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve {

class DecodeService final : public internal::v1::DecodeWorker::CallbackService {
 public:
  explicit DecodeService(BatchScheduler* scheduler) : scheduler_(scheduler) {}

  grpc::ServerWriteReactor<internal::v1::DecodeResponse>* Decode(grpc::CallbackServerContext* context,
                                                                 const internal::v1::DecodeRequest* request) override;
  grpc::ServerReadReactor<internal::v1::KvChunk>* PushKv(grpc::CallbackServerContext* context,
                                                         internal::v1::PushKvResponse* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context, const internal::v1::GetLoadRequest* request,
                                    internal::v1::GetLoadResponse* response) override;

 private:
  BatchScheduler* scheduler_;
};

}  // namespace pdserve
