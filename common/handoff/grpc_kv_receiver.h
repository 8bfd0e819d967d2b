// The gRPC receiving end of the hand-off: a reactor for
// DecodeWorker.PushKv that feeds a KvReceiver, and the NcclConnect answer.
// The decode service returns them from its methods.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/handoff/kv_transfer.h"
#include "common/handoff/nccl_kv_receiver.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

// Reads chunks into a session from `receiver` (through a
// ChunkReceiveSession, which checks them). On a rejected chunk it
// aborts the session and finishes the call with the session's status; on a
// broken or cancelled stream it aborts the session. Data chunks whose
// payload travels over NCCL are received through `nccl` off the reactor
// thread; a header naming a communicator `nccl` lacks (or a null `nccl`)
// is FAILED_PRECONDITION, and a failed stream drops its communicator.
// Deletes itself when done.
grpc::ServerReadReactor<internal::v1::KvChunk>* NewPushKvReactor(grpc::CallbackServerContext* context,
                                                                  KvReceiver* receiver,
                                                                  internal::v1::PushKvResponse* response,
                                                                  NcclKvReceiver* nccl = nullptr);

}  // namespace pdserve
