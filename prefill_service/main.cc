// pdserve-prefill: a prefill worker. Runs prompts and hands their K/V to
// the decode worker the router names.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "clients/cli_util.h"
#include "common/handoff/kv_transfer.h"
#include "common/net/engine_flags.h"
#include "common/net/metrics.h"
#include "common/net/server.h"
#include "prefill_service/prefill_service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50053", "host:port to serve PrefillWorker on (port 0 picks one).");
ABSL_FLAG(std::string, decode_allowlist, "",
          "Comma-separated host:port of the decode workers a Prefill call may name; others get PERMISSION_DENIED. "
          "Empty = any (the router picks; keep the internal port private).");
ABSL_FLAG(int, handoff_heartbeat_ms, 5000,
          "While a prompt is prefilled, milliseconds between the heartbeats that keep its decode worker's hand-off "
          "timeout from expiring.");
ABSL_FLAG(int, max_queue, 16, "Prompts that may wait for an executor; more get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, executors, 1, "Prompts prefilled at once.");
ABSL_FLAG(std::string, kv_transport, "grpc",
          "KV hand-off transport: grpc, or nccl (payloads GPU to GPU over a NCCL communicator per decode worker; "
          "a pair that can't form one uses gRPC and logs why).");
ABSL_FLAG(int, metrics_port, 9091, "HTTP port for Prometheus /metrics; 0 picks one, -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0",
          "Address the /metrics HTTP server binds (0.0.0.0: every interface; 127.0.0.1: this host only).");
ABSL_FLAG(int, drain_timeout_s, 20, "On SIGTERM, seconds to let running prefills finish.");

int main(int argc, char** argv) {
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;
  pdserve::InitCli(argc, argv,
                   "A pdserve prefill worker.\n"
                   "Usage: pdserve-prefill --model DIR [--listen 0.0.0.0:50053] [--kv-dtype f32|bf16]\n"
                   "       [--max-queue N] [--threads N] [--prefill-chunk N] [--kv-transport grpc|nccl]");
  auto transport = pdserve::ParseKvTransport(absl::GetFlag(FLAGS_kv_transport));
  if (!transport.ok()) pdserve::Die(transport.status(), 2);
  if (*transport == pdserve::KvTransport::kInProcess) {
    pdserve::Die("--kv-transport inprocess needs the decode worker in this process (use pdserve-local)", 2);
  }
  auto loaded = pdserve::LoadEngineFromFlags();
  if (!loaded.ok()) pdserve::Die(loaded.status());

  auto sender = pdserve::MakeKvSender(*transport, loaded->engine->config());
  pdserve::PrefillServiceOptions po;
  po.max_queue = absl::GetFlag(FLAGS_max_queue);
  po.executors = absl::GetFlag(FLAGS_executors);
  po.model_fingerprint = loaded->fingerprint;
  po.progress_interval = absl::Milliseconds(absl::GetFlag(FLAGS_handoff_heartbeat_ms));
  po.allowed_decode_addresses = absl::StrSplit(absl::GetFlag(FLAGS_decode_allowlist), ',', absl::SkipWhitespace());
  po.metrics = &metrics;
  if (po.max_queue < 0 || po.executors < 1) pdserve::Die("--max-queue must be >= 0 and --executors >= 1", 2);
  pdserve::PrefillService service(loaded->engine.get(), sender.get(), po);
  service.Start();

  auto server = pdserve::StartServer(absl::GetFlag(FLAGS_listen), {&service});
  if (!server.ok()) pdserve::Die(server.status());
  std::fprintf(stderr, "pdserve-prefill: serving on port %d\n", server->port);

  auto metrics_server = pdserve::ServeMetrics(absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
                                              &metrics, "pdserve-prefill");
  if (!metrics_server.ok()) pdserve::Die(metrics_server.status());

  const int sig = pdserve::WaitForShutdownSignal();
  std::fprintf(stderr, "pdserve-prefill: signal %d, draining\n", sig);
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  service.Shutdown();
  return 0;
}
