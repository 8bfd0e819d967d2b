// pdserve-prefill: a prefill worker. Runs prompts and hands their K/V to
// the decode worker the router names. Its component flags are
// prefill_service/prefill_flags, the engine's common/engine/engine_flags;
// the ones here are this process's.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine_flags.h"
#include "common/handoff/kv_transfer.h"
#include "common/net/grpc_security.h"
#include "common/net/log_flags.h"
#include "common/net/metrics.h"
#include "common/net/server.h"
#include "common/util/omp_env.h"
#include "prefill_service/prefill_flags.h"
#include "prefill_service/prefill_service.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50053", "host:port to serve PrefillWorker on (port 0 picks one).");
ABSL_FLAG(std::string, decode_allowlist, "",
          "Comma-separated host:port of the decode workers a Prefill call may name; others get PERMISSION_DENIED. "
          "Empty = any (the router picks; keep the internal port private).");
ABSL_FLAG(std::string, kv_transport, "grpc",
          "KV hand-off transport: grpc, or nccl (payloads GPU to GPU over a NCCL communicator per decode worker; "
          "a pair that can't form one uses gRPC and logs why).");
ABSL_FLAG(int, metrics_port, 9401, "HTTP port for Prometheus /metrics; 0 picks one, -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0",
          "Address the /metrics HTTP server binds (0.0.0.0: every interface; 127.0.0.1: this host only).");
ABSL_FLAG(int, drain_timeout_s, 20, "On SIGTERM, seconds to let running prefills finish.");

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  constexpr char kProgram[] = "pdserve-prefill";
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;
  pdserve::InitCli(argc, argv,
                   "A pdserve prefill worker.\n"
                   "Usage: pdserve-prefill --model DIR [--listen 0.0.0.0:50053] [--kv-dtype f32|bf16]\n"
                   "       [--max-queue N] [--threads N] [--prefill-chunk N] [--kv-transport grpc|nccl]");
  pdserve::InitServerLogging("prefill");
  auto options = pdserve::PrefillOptionsFromFlags();
  if (!options.ok()) pdserve::Die(options.status(), 2);
  auto transport = pdserve::ParseKvTransport(absl::GetFlag(FLAGS_kv_transport));
  if (!transport.ok()) pdserve::Die(transport.status(), 2);
  if (*transport == pdserve::KvTransport::kInProcess) {
    pdserve::Die("--kv-transport inprocess needs the decode worker in this process (use pdserve-local)", 2);
  }
  auto security_flags = pdserve::InternalSecurityFromFlags();  // TLS needs --tls-ca: mTLS only
  if (!security_flags.ok()) pdserve::Die(security_flags.status(), 2);
  const pdserve::SecurityOptions security = *std::move(security_flags);
  // Each executor holds one prompt's KV (up to max_context) until its decode
  // worker acknowledges the hand-off, and the chunks queued for the wire
  // (KvSenderOptions::max_queued_bytes): counted in the memory estimate.
  auto loaded = pdserve::LoadEngineFromFlags(0, options->executors, pdserve::KvSenderOptions{}.max_queued_bytes);
  if (!loaded.ok()) pdserve::Die(loaded.status());
  metrics.SetConstantLabels(pdserve::ModelLabels(loaded->engine->config().name));

  pdserve::KvSenderOptions sender_options;
  sender_options.channel_security = pdserve::ChannelSecurityFor(security);  // to decode workers: mTLS
  auto sender = pdserve::MakeKvSender(*transport, loaded->engine->config(), sender_options);
  options->model_fingerprint = loaded->fingerprint;
  options->allowed_decode_addresses =
      absl::StrSplit(absl::GetFlag(FLAGS_decode_allowlist), ',', absl::SkipWhitespace());
  options->metrics = &metrics;
  pdserve::PrefillService service(loaded->engine.get(), sender.get(), *options);
  service.Start();

  const absl::Status served = pdserve::ServeUntilShutdownSignal(
      {kProgram, absl::GetFlag(FLAGS_listen), absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
       absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)), security.tls() ? " (mTLS)" : "",
       pdserve::ServerCredentialsFor(security, pdserve::PortKind::kInternal)},
      {&service}, &metrics);
  if (!served.ok()) pdserve::Die(served);
  service.Shutdown();
  return 0;
}
