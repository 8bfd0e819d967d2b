// The NCCL transport in a build without NCCL (PDSERVE_HAVE_NCCL off): the
// sender is the gRPC one and the receiver refuses every NcclConnect, so a
// --kv-transport nccl pair agrees on gRPC and the manifests of the gpu
// overlay still run on CPU images.
#include <cstdio>

#include "common/handoff/kv_transports.h"
#include "common/handoff/nccl_kv_receiver.h"
#include "common/util/log.h"

namespace pdserve {
namespace {

class RefusingNcclKvReceiver final : public NcclKvReceiver {
 public:
  internal::v1::NcclConnectResponse Connect(const internal::v1::NcclConnectRequest& request) override {
    internal::v1::NcclConnectResponse r;
    r.set_reason("the decode worker was built without NCCL");
    return r;
  }
  bool Has(const std::string& comm_id) override { return false; }
  absl::Status ReceivePayload(const std::string& comm_id, internal::v1::KvChunk* chunk,
                              std::function<void(absl::Status)> done) override {
    return UnknownNcclCommError(comm_id);
  }
  void Drop(const std::string& comm_id, const absl::Status& why) override {}
};

}  // namespace

std::unique_ptr<NcclKvReceiver> MakeNcclKvReceiver(const NcclReceiverOptions& options) {
  return std::make_unique<RefusingNcclKvReceiver>();
}

bool NcclTransportBuilt() { return false; }

std::unique_ptr<KvSender> MakeNcclKvSender(const ModelConfig& config, const KvSenderOptions& options) {
  log::Warn("--kv-transport nccl: this binary was built without NCCL; the KV hand-off uses gRPC", {},
            log::TextPrefix::None());
  return MakeGrpcKvSender(config, options);
}

}  // namespace pdserve
