#include "common/handoff/kv_transfer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/handoff/kv_transports.h"

namespace pdserve {

KvHandoffLayout KvHandoffLayout::Of(const ModelConfig& config, KvDtype dtype, std::string model_fingerprint) {
  KvHandoffLayout l;
  l.model_fingerprint = std::move(model_fingerprint);
  l.n_layers = config.n_layers;
  l.window = config.window;
  l.n_kv_heads = config.n_kv_heads;
  l.head_dim = config.head_dim;
  l.dtype = dtype;
  return l;
}

int64_t KvHandoffLayout::Rows(int64_t layer, int64_t prompt_len) const {
  return ModelConfig::IsWindowed(layer) ? std::min(prompt_len, window) : prompt_len;
}

absl::StatusOr<KvTransport> ParseKvTransport(const std::string& name) {
  if (name == "grpc") return KvTransport::kGrpc;
  if (name == "inprocess") return KvTransport::kInProcess;
  if (name == "nccl") return KvTransport::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV transport '", name, "': expected 'grpc', 'nccl' or 'inprocess'"));
}

InProcessKvRegistry& InProcessKvRegistry::Global() {
  static auto* registry = new InProcessKvRegistry();
  return *registry;
}

void InProcessKvRegistry::Register(const std::string& address, KvReceiver* receiver) {
  absl::MutexLock lock(&mu_);
  receivers_[address] = receiver;
}

void InProcessKvRegistry::Unregister(const std::string& address) {
  absl::MutexLock lock(&mu_);
  receivers_.erase(address);
}

KvReceiver* InProcessKvRegistry::Find(const std::string& address) const {
  absl::MutexLock lock(&mu_);
  auto it = receivers_.find(address);
  return it == receivers_.end() ? nullptr : it->second;
}

std::unique_ptr<KvSender> MakeKvSender(KvTransport transport, const ModelConfig& config,
                                       const KvSenderOptions& options) {
  switch (transport) {
    case KvTransport::kInProcess: return MakeInProcessKvSender(config, options);
    case KvTransport::kNccl: return MakeNcclKvSender(config, options);
    case KvTransport::kGrpc: break;
  }
  return MakeGrpcKvSender(config, options);
}

}  // namespace pdserve
