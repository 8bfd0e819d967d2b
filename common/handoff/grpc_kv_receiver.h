// The gRPC receiving end of the hand-off: a reactor for
// DecodeWorker.PushKv that feeds a KvReceiver. The decode service returns
// it from its PushKv method.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/handoff/kv_transfer.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

// Reads chunks into a session from `receiver`. On a rejected chunk it
// aborts the session and finishes the call with the session's status; on a
// broken or cancelled stream it aborts the session. Deletes itself when done.
grpc::ServerReadReactor<internal::v1::KvChunk>* NewPushKvReactor(grpc::CallbackServerContext* context,
                                                                  KvReceiver* receiver,
                                                                  internal::v1::PushKvResponse* response);

}  // namespace pdserve
