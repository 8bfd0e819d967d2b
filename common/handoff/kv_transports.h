// Transport factories behind MakeKvSender (kv_transfer.h); use that.
#pragma once

#include <memory>

#include "common/handoff/kv_transfer.h"

namespace pdserve {

std::unique_ptr<KvSender> MakeInProcessKvSender(const ModelConfig& config, const KvSenderOptions& options);
std::unique_ptr<KvSender> MakeGrpcKvSender(const ModelConfig& config, const KvSenderOptions& options);
// In a build without NCCL: a gRPC sender, after a warning.
std::unique_ptr<KvSender> MakeNcclKvSender(const ModelConfig& config, const KvSenderOptions& options);

}  // namespace pdserve
