// pdserve-router: the public Generator service in front of prefill and
// decode workers.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "clients/cli_util.h"
#include "common/net/metrics.h"
#include "common/net/server.h"
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
ABSL_FLAG(uint32_t, max_new_tokens_cap, 4096, "Largest max_new_tokens a request may ask for.");
ABSL_FLAG(int, max_attempts, 3, "Placement attempts per request before UNAVAILABLE.");
ABSL_FLAG(int, wait_for_workers_s, 60, "At startup, seconds to wait for one healthy worker of each kind.");
ABSL_FLAG(int64_t, local_prefill_max_tokens, 0,
          "Prompts of at most this many tokens are prefilled on the decode worker itself (no prefill "
          "worker, no KV hand-off); 0 turns it off.");
ABSL_FLAG(int, max_inflight, 512, "Requests placed or streaming at once; more wait in the queue.");
ABSL_FLAG(int, max_queued_requests, 4096,
          "Requests that may wait, in arrival order, for a worker with room (deadlines honoured); more get "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_inflight_per_client, 0,
          "Requests one client address may have queued or in flight; more get RESOURCE_EXHAUSTED (0 = no limit).");
ABSL_FLAG(bool, log_requests, true, "Print one line per finished request on stderr.");
ABSL_FLAG(int, metrics_port, 9090, "HTTP port for Prometheus /metrics; 0 picks one, -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "0.0.0.0",
          "Address the /metrics HTTP server binds (0.0.0.0: every interface; 127.0.0.1: this host only).");
ABSL_FLAG(int, drain_timeout_s, 20, "On SIGTERM, seconds to let live streams finish.");

namespace {

std::vector<std::string> SplitList(const std::string& s) {
  return absl::StrSplit(s, ',', absl::SkipWhitespace());
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;
  pdserve::InitCli(argc, argv,
                   "The pdserve router.\n"
                   "Usage: pdserve-router --model DIR --prefill HOST:PORT[,...] --decode HOST:PORT[,...]\n"
                   "       [--listen 0.0.0.0:50051] [--prefill-dns NAME:PORT --decode-dns NAME:PORT]");
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) pdserve::Die("--model is required (the router reads its config.json)", 2);
  auto config = pdserve::LoadModelConfig(model + "/config.json");
  if (!config.ok()) pdserve::Die(config.status());
  auto tokenizer = pdserve::MakeTokenizer(*config, model);
  if (absl::IsUnimplemented(tokenizer.status()) || absl::IsNotFound(tokenizer.status())) {
    // A model without its tokenizer file (random weights for benchmarks) is
    // still served, as token ids; say so once, loudly.
    std::fprintf(stderr, "%s: warning: %s; serving token_ids prompts only\n", "pdserve-router",
                 std::string(tokenizer.status().message()).c_str());
    tokenizer = pdserve::MakeIdsOnlyTokenizer((*config).vocab_size, std::string(tokenizer.status().message()));
  }
  if (!tokenizer.ok()) pdserve::Die(tokenizer.status());

  auto pool_options = [](const std::string& list, const std::string& dns) {
    pdserve::WorkerPoolOptions o;
    o.addresses = SplitList(list);
    o.dns_targets = SplitList(dns);
    o.resolve_interval = absl::Seconds(absl::GetFlag(FLAGS_resolve_interval_s));
    o.poll_interval = absl::Milliseconds(absl::GetFlag(FLAGS_poll_interval_ms));
    return o;
  };
  pdserve::WorkerPoolOptions po = pool_options(absl::GetFlag(FLAGS_prefill), absl::GetFlag(FLAGS_prefill_dns));
  pdserve::WorkerPoolOptions dopt = pool_options(absl::GetFlag(FLAGS_decode), absl::GetFlag(FLAGS_decode_dns));
  if (po.addresses.empty() && po.dns_targets.empty()) pdserve::Die("give --prefill or --prefill-dns", 2);
  if (dopt.addresses.empty() && dopt.dns_targets.empty()) pdserve::Die("give --decode or --decode-dns", 2);
  pdserve::WorkerPool prefill(pdserve::WorkerKind::kPrefill, po);
  pdserve::WorkerPool decode(pdserve::WorkerKind::kDecode, dopt);
  prefill.Start();
  decode.Start();
  const absl::Duration wait = absl::Seconds(absl::GetFlag(FLAGS_wait_for_workers_s));
  for (pdserve::WorkerPool* pool : {&prefill, &decode}) {
    absl::Status st = pool->WaitForHealthy(1, wait);
    if (!st.ok()) std::fprintf(stderr, "pdserve-router: warning: %s\n", std::string(st.message()).c_str());
  }

  pdserve::RouterOptions ro;
  ro.limits.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens_cap);
  ro.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  ro.log_requests = absl::GetFlag(FLAGS_log_requests);
  ro.local_prefill_max_tokens = absl::GetFlag(FLAGS_local_prefill_max_tokens);
  ro.queue.max_active = absl::GetFlag(FLAGS_max_inflight);
  ro.queue.max_waiting = absl::GetFlag(FLAGS_max_queued_requests);
  ro.queue.max_per_client = absl::GetFlag(FLAGS_max_inflight_per_client);
  ro.metrics = &metrics;
  if (ro.max_attempts < 1) pdserve::Die("--max-attempts must be >= 1", 2);
  if (ro.queue.max_active < 1 || ro.queue.max_waiting < 0 || ro.queue.max_per_client < 0) {
    pdserve::Die("--max-inflight must be >= 1, --max-queued-requests and --max-inflight-per-client >= 0", 2);
  }
  pdserve::RouterService service(*config, std::move(*tokenizer), &prefill, &decode, ro);
  auto server = pdserve::StartServer(absl::GetFlag(FLAGS_listen), {&service});
  if (!server.ok()) pdserve::Die(server.status());
  std::fprintf(stderr, "pdserve-router: serving on port %d\n", server->port);

  auto metrics_server = pdserve::ServeMetrics(absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
                                              &metrics, "pdserve-router");
  if (!metrics_server.ok()) pdserve::Die(metrics_server.status());

  const int sig = pdserve::WaitForShutdownSignal();
  std::fprintf(stderr, "pdserve-router: signal %d, draining\n", sig);
  server->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  return 0;
}
