// pdserve-router: the public Generator service in front of prefill and
// decode workers. The router's component flags are router/router_flags;
// the ones here are this process's: where it listens, where its workers
// are, /metrics and the drain.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli/cli_util.h"
#include "common/net/grpc_security.h"
#include "common/net/log_flags.h"
#include "common/net/metrics.h"
#include "common/net/security_flags.h"
#include "common/net/server.h"
#include "common/util/log.h"
#include "router/openai_http.h"
#include "router/router_http.h"
#include "router/router_flags.h"
#include "router/router_service.h"
#include "router/worker_pool.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051", "host:port to serve pdserve.v1.Generator on.");
ABSL_FLAG(std::string, model, "", "Model directory: its config.json (and tokenizer) are read, not the weights.");
ABSL_FLAG(std::string, prefill, "", "Prefill workers, comma-separated host:port.");
ABSL_FLAG(std::string, decode, "", "Decode workers, comma-separated host:port.");
ABSL_FLAG(std::string, prefill_dns, "",
          "Prefill workers as DNS names, comma-separated name:port, re-resolved periodically "
          "(Kubernetes headless Services).");
ABSL_FLAG(std::string, decode_dns, "", "Decode workers as DNS names (name:port), like --prefill-dns.");
ABSL_FLAG(int, resolve_interval_s, 5, "Seconds between DNS re-resolutions.");
ABSL_FLAG(int, poll_interval_ms, 500, "Milliseconds between health and load polls of each worker.");
ABSL_FLAG(int, wait_for_workers_s, 60, "At startup, seconds to wait for one healthy worker of each kind.");
ABSL_FLAG(int, metrics_port, 9400, "HTTP port for Prometheus /metrics; 0 picks one, -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0",
          "Address the /metrics HTTP server binds (0.0.0.0: every interface; 127.0.0.1: this host only).");
ABSL_FLAG(int, drain_timeout_s, 20, "On SIGTERM, seconds to let live streams finish.");
ABSL_FLAG(std::string, http_listen, "0.0.0.0:8000",
          "host:port of the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /v1/models, "
          "/health, /metrics); port 0 picks one, empty turns it off.");

namespace {

constexpr char kProgram[] = "pdserve-router";

std::vector<std::string> SplitList(const std::string& s) { return absl::StrSplit(s, ',', absl::SkipWhitespace()); }

// The workers of one kind, from --prefill/--prefill-dns (or the decode
// pair); exits 2 when neither is given.
pdserve::WorkerPoolOptions PoolOptions(const char* kind, const std::string& list, const std::string& dns) {
  pdserve::WorkerPoolOptions o;
  o.addresses = SplitList(list);
  o.dns_targets = SplitList(dns);
  o.resolve_interval = absl::Seconds(absl::GetFlag(FLAGS_resolve_interval_s));
  o.poll_interval = absl::Milliseconds(absl::GetFlag(FLAGS_poll_interval_ms));
  if (o.addresses.empty() && o.dns_targets.empty()) pdserve::Die(absl::StrCat("give --", kind, " or --", kind, "-dns"), 2);
  return o;
}

// Starts polling both pools and waits (--wait-for-workers-s) for one healthy
// worker of each kind; serving starts either way, with a warning.
void StartPools(pdserve::WorkerPool* prefill, pdserve::WorkerPool* decode) {
  prefill->Start();
  decode->Start();
  const absl::Duration wait = absl::Seconds(absl::GetFlag(FLAGS_wait_for_workers_s));
  for (pdserve::WorkerPool* pool : {prefill, decode}) {
    absl::Status st = pool->WaitForHealthy(1, wait);
    if (!st.ok()) pdserve::log::Warn(st.message());
  }
}

// Serves `service` (and --http-listen on its in-process channel) until
// SIGTERM or SIGINT, then drains (--drain-timeout-s). The public port is TLS
// when --tls-cert is given (no client certificate: callers authenticate with
// the API key).
void ServeUntilSignal(pdserve::RouterService* service, pdserve::MetricsRegistry* metrics,
                      pdserve::OpenAiHttpOptions http) {
  const pdserve::ServeOptions o{kProgram,
                                absl::GetFlag(FLAGS_listen),
                                absl::GetFlag(FLAGS_metrics_host),
                                absl::GetFlag(FLAGS_metrics_port),
                                absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)),
                                http.security.tls() ? " (TLS)" : "",
                                pdserve::ServerCredentialsFor(http.security, pdserve::PortKind::kPublic)};
  const pdserve::FrontendStarter start_http = [&http](grpc::Server* server) -> absl::StatusOr<std::shared_ptr<void>> {
    http.channel = server->InProcessChannel(pdserve::DefaultChannelArguments());
    auto started = pdserve::ServeOpenAiHttp(absl::GetFlag(FLAGS_http_listen), std::move(http));
    if (!started.ok()) return started.status();
    return std::shared_ptr<void>(std::move(*started));
  };
  const absl::Status served = pdserve::ServeUntilShutdownSignal(o, {service}, metrics, start_http);
  if (!served.ok()) pdserve::Die(served);
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;
  pdserve::InitCli(argc, argv,
                   "The pdserve router.\n"
                   "Usage: pdserve-router --model DIR --prefill HOST:PORT[,...] --decode HOST:PORT[,...]\n"
                   "       [--listen 0.0.0.0:50051] [--http-listen 0.0.0.0:8000]\n"
                   "       [--prefill-dns NAME:PORT --decode-dns NAME:PORT]");
  pdserve::InitServerLogging("router");
  auto options = pdserve::RouterOptionsFromFlags();
  if (!options.ok()) pdserve::Die(options.status(), 2);
  // With TLS the router needs --tls-ca too: it dials its workers with mTLS.
  auto security_flags = pdserve::InternalSecurityFromFlags();
  if (!security_flags.ok()) pdserve::Die(security_flags.status(), 2);
  const pdserve::SecurityOptions security = *std::move(security_flags);
  options->metrics = &metrics;
  options->api_key = security.api_key;
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) pdserve::Die("--model is required (the router reads its config.json)", 2);
  pdserve::WorkerPoolOptions po = PoolOptions("prefill", absl::GetFlag(FLAGS_prefill), absl::GetFlag(FLAGS_prefill_dns));
  pdserve::WorkerPoolOptions dpo = PoolOptions("decode", absl::GetFlag(FLAGS_decode), absl::GetFlag(FLAGS_decode_dns));
  po.channel_security = dpo.channel_security = pdserve::ChannelSecurityFor(security);
  auto config = pdserve::LoadModelConfig(model + "/config.json");
  if (!config.ok()) pdserve::Die(config.status());
  metrics.SetConstantLabels(pdserve::ModelLabels(config->name));
  auto tokenizer = pdserve::MakeServingTokenizer(*config, model, kProgram);
  if (!tokenizer.ok()) pdserve::Die(tokenizer.status());

  pdserve::WorkerPool prefill(pdserve::WorkerKind::kPrefill, po);
  pdserve::WorkerPool decode(pdserve::WorkerKind::kDecode, dpo);
  StartPools(&prefill, &decode);
  pdserve::RouterService service(*config, std::move(*tokenizer), &prefill, &decode, *std::move(options));
  pdserve::OpenAiHttpOptions http =
      pdserve::RouterHttpOptions(kProgram, &*config, &prefill, &decode, &metrics, security);
  http.request_timeout = pdserve::HttpRequestTimeoutFromFlags();
  http.tokenizer = service.tokenizer();  // a harmony model's chat
  ServeUntilSignal(&service, &metrics, std::move(http));
  return 0;
}
