// DecodeService: the DecodeWorker gRPC service over a BatchScheduler.
//   Decode  (router)  admits the request against the KV budget, answers
//                     one `admitted` message, then streams its tokens;
//   PushKv  (prefill) the hand-off stream, validated chunk by chunk;
//   GetLoad (router)  active sequences, free KV bytes, batch sizes;
//   NcclConnect (prefill) forms a NCCL communicator for the hand-off's
//                     payloads (--kv-transport nccl), or refuses.
#pragma once

#include "common/handoff/nccl_kv_receiver.h"
#include "decode_service/batch_scheduler.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve {

class DecodeService final : public internal::v1::DecodeWorker::CallbackService {
 public:
  // `nccl`: the NCCL hand-off receiver, or null to refuse NcclConnect.
  explicit DecodeService(BatchScheduler* scheduler, NcclKvReceiver* nccl = nullptr)
      : scheduler_(scheduler), nccl_(nccl) {}

  grpc::ServerWriteReactor<internal::v1::DecodeResponse>* Decode(grpc::CallbackServerContext* context,
                                                                 const internal::v1::DecodeRequest* request) override;
  grpc::ServerReadReactor<internal::v1::KvChunk>* PushKv(grpc::CallbackServerContext* context,
                                                         internal::v1::PushKvResponse* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context, const internal::v1::GetLoadRequest* request,
                                    internal::v1::GetLoadResponse* response) override;
  grpc::ServerUnaryReactor* NcclConnect(grpc::CallbackServerContext* context,
                                        const internal::v1::NcclConnectRequest* request,
                                        internal::v1::NcclConnectResponse* response) override;

 private:
  BatchScheduler* scheduler_;
  NcclKvReceiver* nccl_;
};

}  // namespace pdserve
