// pdserve-decode: a decode worker. Receives KV hand-offs, decodes every
// admitted sequence in one batched loop, streams tokens to the router.
#include <cstdio>

#include "absl/flags/flag.h"
#include "clients/cli_util.h"
#include "common/handoff/kv_transfer.h"
#include "common/handoff/nccl_kv_receiver.h"
#include "common/net/engine_flags.h"
#include "common/net/metrics.h"
#include "common/net/server.h"
#include "decode_service/batch_scheduler.h"
#include "decode_service/decode_service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50052", "host:port to serve DecodeWorker on (port 0 picks one).");
ABSL_FLAG(int64_t, kv_budget_mb, 4096, "KV bytes (MiB) all live sequences may reserve together.");
ABSL_FLAG(int, max_batch, 64, "Sequences per decode step.");
ABSL_FLAG(int, handoff_timeout_s, 60,
          "Seconds an admitted request may wait for its KV hand-off to start, and a started hand-off may go without "
          "progress (the prefill worker sends a heartbeat every 5 s).");
ABSL_FLAG(int64_t, local_prefill_max_tokens, 2048,
          "Longest prompt a Decode call may ask this worker to prefill itself (it stalls running streams meanwhile); "
          "longer ones get INVALID_ARGUMENT. Keep it >= the router's --local-prefill-max-tokens.");
ABSL_FLAG(int, metrics_port, 9092, "HTTP port for Prometheus /metrics; 0 picks one, -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0",
          "Address the /metrics HTTP server binds (0.0.0.0: every interface; 127.0.0.1: this host only).");
ABSL_FLAG(int, drain_timeout_s, 20, "On SIGTERM, seconds to let live streams finish before cancelling them.");
ABSL_FLAG(std::string, kv_transport, "grpc",
          "KV hand-off transport: grpc, or nccl (also accept NcclConnect from prefill workers and receive the "
          "payloads over NCCL on this worker's GPU; a pair that can't form a communicator uses gRPC).");

int main(int argc, char** argv) {
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;
  pdserve::InitCli(argc, argv,
                   "A pdserve decode worker.\n"
                   "Usage: pdserve-decode --model DIR [--listen 0.0.0.0:50052] [--kv-dtype f32|bf16]\n"
                   "       [--kv-budget-mb MB] [--max-batch N] [--threads N] [--kv-transport grpc|nccl]");
  auto transport = pdserve::ParseKvTransport(absl::GetFlag(FLAGS_kv_transport));
  if (!transport.ok()) pdserve::Die(transport.status(), 2);
  if (*transport == pdserve::KvTransport::kInProcess) {
    pdserve::Die("--kv-transport inprocess needs the prefill worker in this process (use pdserve-local)", 2);
  }
  // Outlives the server: PushKv reactors receive through it.
  std::unique_ptr<pdserve::NcclKvReceiver> nccl;
  if (*transport == pdserve::KvTransport::kNccl) {
    if (!pdserve::NcclTransportBuilt()) {
      std::fprintf(stderr, "pdserve-decode: --kv-transport nccl: this binary was built without NCCL; the KV "
                           "hand-off uses gRPC\n");
    }
    nccl = pdserve::MakeNcclKvReceiver();  // without NCCL: refuses every NcclConnect
  }
  auto loaded = pdserve::LoadEngineFromFlags();
  if (!loaded.ok()) pdserve::Die(loaded.status());

  pdserve::BatchSchedulerOptions so;
  so.kv_budget_bytes = absl::GetFlag(FLAGS_kv_budget_mb) << 20;
  so.max_batch = absl::GetFlag(FLAGS_max_batch);
  so.handoff_timeout = absl::Seconds(absl::GetFlag(FLAGS_handoff_timeout_s));
  so.local_prefill_max_tokens = absl::GetFlag(FLAGS_local_prefill_max_tokens);
  so.model_fingerprint = loaded->fingerprint;
  so.metrics = &metrics;
  if (so.kv_budget_bytes <= 0 || so.max_batch < 1) pdserve::Die("--kv-budget-mb and --max-batch must be >= 1", 2);
  pdserve::BatchScheduler scheduler(loaded->engine.get(), so);
  scheduler.Start();
  pdserve::DecodeService service(&scheduler, nccl.get());

  auto server = pdserve::StartServer(absl::GetFlag(FLAGS_listen), {&service});
  if (!server.ok()) pdserve::Die(server.status());
  std::fprintf(stderr, "pdserve-decode: serving on port %d (KV budget %lld MiB)\n", server->port,
               static_cast<long long>(absl::GetFlag(FLAGS_kv_budget_mb)));

  auto metrics_server = pdserve::ServeMetrics(absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
                                              &metrics, "pdserve-decode");
  if (!metrics_server.ok()) pdserve::Die(metrics_server.status());

  const int sig = pdserve::WaitForShutdownSignal();
  std::fprintf(stderr, "pdserve-decode: signal %d, draining\n", sig);
  // Stop taking calls, let live streams finish, then cancel what is left.
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  scheduler.Shutdown();
  return 0;
}
