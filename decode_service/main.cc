// pdserve-decode: a decode worker. Receives KV hand-offs, decodes every
// admitted sequence in one batched loop, streams tokens to the router. Its
// component flags are decode_service/decode_flags, the engine's
// common/engine/engine_flags; the ones here are this process's.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine_flags.h"
#include "common/handoff/kv_transfer.h"
#include "common/handoff/nccl_kv_receiver.h"
#include "common/net/grpc_security.h"
#include "common/net/log_flags.h"
#include "common/net/metrics.h"
#include "common/net/server.h"
#include "common/util/log.h"
#include "common/util/omp_env.h"
#include "decode_service/batch_scheduler.h"
#include "decode_service/decode_flags.h"
#include "decode_service/decode_service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50052", "host:port to serve DecodeWorker on (port 0 picks one).");
ABSL_FLAG(int, metrics_port, 9402, "HTTP port for Prometheus /metrics; 0 picks one, -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0",
          "Address the /metrics HTTP server binds (0.0.0.0: every interface; 127.0.0.1: this host only).");
ABSL_FLAG(int, drain_timeout_s, 20, "On SIGTERM, seconds to let live streams finish before cancelling them.");
ABSL_FLAG(std::string, kv_transport, "grpc",
          "KV hand-off transport: grpc, or nccl (also accept NcclConnect from prefill workers and receive the "
          "payloads over NCCL on this worker's GPU; a pair that can't form a communicator uses gRPC).");

namespace {

constexpr char kProgram[] = "pdserve-decode";

// --kv-transport: nullptr for grpc, the NCCL receiver for nccl (without
// NCCL built in, one that refuses every NcclConnect). Exits 2 on a bad value.
std::unique_ptr<pdserve::NcclKvReceiver> MakeReceiver() {
  auto transport = pdserve::ParseKvTransport(absl::GetFlag(FLAGS_kv_transport));
  if (!transport.ok()) pdserve::Die(transport.status(), 2);
  if (*transport == pdserve::KvTransport::kInProcess) {
    pdserve::Die("--kv-transport inprocess needs the prefill worker in this process (use pdserve-local)", 2);
  }
  if (*transport != pdserve::KvTransport::kNccl) return nullptr;
  if (!pdserve::NcclTransportBuilt()) {
    pdserve::log::Info("--kv-transport nccl: this binary was built without NCCL; the KV hand-off uses gRPC");
  }
  return pdserve::MakeNcclKvReceiver();
}

// Serves `service` until SIGTERM or SIGINT, then lets live streams finish
// (--drain-timeout-s) and cancels what is left.
void ServeUntilSignal(pdserve::DecodeService* service, pdserve::BatchScheduler* scheduler,
                      pdserve::MetricsRegistry* metrics, int64_t kv_budget_bytes,
                      const pdserve::SecurityOptions& security) {
  const absl::Status served = pdserve::ServeUntilShutdownSignal(
      {kProgram, absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
       absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)),
       absl::StrCat(" (KV budget ", kv_budget_bytes >> 20, " MiB", security.tls() ? ", mTLS" : "", ")"),
       pdserve::ServerCredentialsFor(security, pdserve::PortKind::kInternal)},
      {service}, metrics);
  if (!served.ok()) pdserve::Die(served);
  scheduler->Shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;
  pdserve::InitCli(argc, argv,
                   "A pdserve decode worker.\n"
                   "Usage: pdserve-decode --model DIR [--listen 0.0.0.0:50052] [--kv-dtype f32|bf16]\n"
                   "       [--kv-budget-mb MB] [--max-batch N] [--threads N] [--kv-transport grpc|nccl]");
  pdserve::InitServerLogging("decode");
  auto options = pdserve::DecodeOptionsFromFlags();
  if (!options.ok()) pdserve::Die(options.status(), 2);
  auto security_flags = pdserve::InternalSecurityFromFlags();  // TLS needs --tls-ca: mTLS only
  if (!security_flags.ok()) pdserve::Die(security_flags.status(), 2);
  const pdserve::SecurityOptions security = *std::move(security_flags);
  // Outlives the server: PushKv reactors receive through it.
  std::unique_ptr<pdserve::NcclKvReceiver> nccl = MakeReceiver();
  auto loaded = pdserve::LoadEngineFromFlags(options->kv_budget_bytes);
  if (!loaded.ok()) pdserve::Die(loaded.status());
  metrics.SetConstantLabels(pdserve::ModelLabels(loaded->engine->config().name));

  options->model_fingerprint = loaded->fingerprint;
  options->metrics = &metrics;
  pdserve::BatchScheduler scheduler(loaded->engine.get(), *options);
  scheduler.Start();
  pdserve::DecodeService service(&scheduler, nccl.get());
  ServeUntilSignal(&service, &scheduler, &metrics, options->kv_budget_bytes, security);
  return 0;
}
