// pdserve-local: the whole stack in one process on loopback. A router on
// 127.0.0.1:PORT, a prefill worker and a decode worker on ports the kernel
// picks; one copy of the weights shared by both workers, and the in-process
// KV hand-off between them (the same chunks and checks as over gRPC).
// Stops cleanly on SIGTERM or Ctrl-C. With --tls-cert/--tls-key the router's
// port is TLS, with --api-key (PDSERVE_API_KEY) it requires the key; the
// workers' ports stay plaintext on 127.0.0.1, inside this process's host.
//
// The component flags are the standalone binaries' own (router_flags,
// decode_flags, prefill_flags, engine_flags: one default each); the ones
// here are this process's: its port, /metrics and the hand-off transport.
//
//   StartDecodeWorker / StartPrefillWorker / StartRouter  one component each
//   ServeUntilSignal                                      /metrics, then stop
#include <algorithm>
#include <cstdio>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cli/cli_util.h"
#include "common/engine/engine_flags.h"
#include "common/handoff/kv_transfer.h"
#include "common/net/grpc_security.h"
#include "common/net/log_flags.h"
#include "common/net/metrics.h"
#include "common/net/security_flags.h"
#include "common/net/server.h"
#include "common/util/log.h"
#include "common/util/omp_env.h"
#include "decode_service/batch_scheduler.h"
#include "decode_service/decode_flags.h"
#include "decode_service/decode_service.h"
#include "prefill_service/prefill_flags.h"
#include "prefill_service/prefill_service.h"
#include "router/openai_http.h"
#include "router/router_http.h"
#include "router/router_flags.h"
#include "router/router_service.h"
#include "router/worker_pool.h"

ABSL_FLAG(int, port, 50051, "Router port on 127.0.0.1.");
ABSL_FLAG(int, metrics_port, 0, "HTTP port for Prometheus /metrics of all three; 0 picks one (printed), -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address the /metrics HTTP server binds (loopback, like the rest of pdserve-local).");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:8000",
          "host:port of the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /v1/models, "
          "/health, /metrics); loopback by default, like the router's gRPC port; port 0 picks one, empty turns "
          "it off.");
ABSL_FLAG(std::string, kv_transport, "inprocess", "KV hand-off between the workers: inprocess or grpc.");

namespace {

constexpr char kProgram[] = "pdserve-local";

// The flags of all three components, validated before the model loads.
struct LocalOptions {
  pdserve::KvTransport transport;
  pdserve::BatchSchedulerOptions decode;
  pdserve::PrefillServiceOptions prefill;
  pdserve::RouterOptions router;
  pdserve::SecurityOptions security;  // the router's port and key
};

LocalOptions OptionsFromFlags(pdserve::MetricsRegistry* metrics) {
  auto transport = pdserve::ParseKvTransport(absl::GetFlag(FLAGS_kv_transport));
  if (!transport.ok()) pdserve::Die(transport.status(), 2);
  auto decode = pdserve::DecodeOptionsFromFlags();
  if (!decode.ok()) pdserve::Die(decode.status(), 2);
  auto prefill = pdserve::PrefillOptionsFromFlags();
  if (!prefill.ok()) pdserve::Die(prefill.status(), 2);
  auto router = pdserve::RouterOptionsFromFlags();
  if (!router.ok()) pdserve::Die(router.status(), 2);
  auto security = pdserve::SecurityOptionsFromFlags();
  if (!security.ok()) pdserve::Die(security.status(), 2);
  LocalOptions o{*transport, *std::move(decode), *std::move(prefill), *std::move(router), *std::move(security)};
  o.router.api_key = o.security.api_key;
  // The decode worker prefills whatever the router sends it to.
  o.decode.local_prefill_max_tokens = std::max(o.decode.local_prefill_max_tokens, o.router.local_prefill_max_tokens);
  o.decode.metrics = o.prefill.metrics = o.router.metrics = metrics;  // one registry: series names say which
  return o;
}

// A gRPC server on a loopback port the kernel picks, and its address.
struct LoopbackServer {
  pdserve::StartedServer started;
  std::string address;
};

LoopbackServer StartLoopback(grpc::Service* service) {
  auto server = pdserve::StartServer("127.0.0.1:0", {service});
  if (!server.ok()) pdserve::Die(server.status());
  const int port = server->port;
  return {*std::move(server), absl::StrCat("127.0.0.1:", port)};
}

struct DecodeWorker {
  std::unique_ptr<pdserve::BatchScheduler> scheduler;
  std::unique_ptr<pdserve::DecodeService> service;
  LoopbackServer server;
};

// The decode worker, registered for the in-process hand-off.
DecodeWorker StartDecodeWorker(const pdserve::LoadedEngine& loaded, pdserve::BatchSchedulerOptions options) {
  options.model_fingerprint = loaded.fingerprint;
  DecodeWorker w;
  w.scheduler = std::make_unique<pdserve::BatchScheduler>(loaded.engine.get(), options);
  w.scheduler->Start();
  w.service = std::make_unique<pdserve::DecodeService>(w.scheduler.get());
  w.server = StartLoopback(w.service.get());
  pdserve::InProcessKvRegistry::Global().Register(w.server.address, w.scheduler.get());
  return w;
}

struct PrefillWorker {
  std::unique_ptr<pdserve::KvSender> sender;
  std::unique_ptr<pdserve::PrefillService> service;
  LoopbackServer server;
};

// The prefill worker; it hands off to `decode_address` only.
PrefillWorker StartPrefillWorker(const pdserve::LoadedEngine& loaded, pdserve::KvTransport transport,
                                 pdserve::PrefillServiceOptions options, const std::string& decode_address) {
  options.model_fingerprint = loaded.fingerprint;
  options.allowed_decode_addresses = {decode_address};
  PrefillWorker w;
  w.sender = pdserve::MakeKvSender(transport, loaded.engine->config());
  w.service = std::make_unique<pdserve::PrefillService>(loaded.engine.get(), w.sender.get(), options);
  w.service->Start();
  w.server = StartLoopback(w.service.get());
  return w;
}

struct Router {
  std::unique_ptr<pdserve::WorkerPool> prefill_pool;
  std::unique_ptr<pdserve::WorkerPool> decode_pool;
  std::unique_ptr<pdserve::RouterService> service;
  pdserve::StartedServer server;
};

// The router on 127.0.0.1:--port (TLS with --tls-cert), in front of the
// two workers.
Router StartRouter(const pdserve::LoadedEngine& loaded, pdserve::RouterOptions options,
                   const pdserve::SecurityOptions& security, const std::string& prefill_address,
                   const std::string& decode_address) {
  const pdserve::ModelConfig& config = loaded.engine->config();
  auto tokenizer = pdserve::MakeServingTokenizer(config, loaded.model_dir, kProgram);
  if (!tokenizer.ok()) pdserve::Die(tokenizer.status());
  pdserve::WorkerPoolOptions ppo, dpo;
  ppo.addresses = {prefill_address};
  dpo.addresses = {decode_address};
  Router r;
  r.prefill_pool = std::make_unique<pdserve::WorkerPool>(pdserve::WorkerKind::kPrefill, ppo);
  r.decode_pool = std::make_unique<pdserve::WorkerPool>(pdserve::WorkerKind::kDecode, dpo);
  r.prefill_pool->Start();
  r.decode_pool->Start();
  r.service = std::make_unique<pdserve::RouterService>(config, std::move(*tokenizer), r.prefill_pool.get(),
                                                       r.decode_pool.get(), std::move(options));
  auto server = pdserve::StartServer(absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port)), {r.service.get()},
                                     pdserve::ServerCredentialsFor(security, pdserve::PortKind::kPublic));
  if (!server.ok()) pdserve::Die(server.status());
  r.server = *std::move(server);
  return r;
}

// The OpenAI HTTP API (--http-listen) on the router's in-process channel;
// nullptr when off. /health asks the router's view of both workers.
std::unique_ptr<pdserve::OpenAiHttpServer> StartHttp(const pdserve::ModelConfig* config,
                                                     pdserve::MetricsRegistry* metrics, Router* router,
                                                     pdserve::SecurityOptions security) {
  pdserve::OpenAiHttpOptions o = pdserve::RouterHttpOptions(kProgram, config, router->prefill_pool.get(),
                                                             router->decode_pool.get(), metrics, std::move(security));
  o.channel = router->server.server->InProcessChannel(pdserve::DefaultChannelArguments());
  o.request_timeout = pdserve::HttpRequestTimeoutFromFlags();
  o.tokenizer = router->service->tokenizer();  // a harmony model's chat
  auto http = pdserve::ServeOpenAiHttp(absl::GetFlag(FLAGS_http_listen), std::move(o));
  if (!http.ok()) pdserve::Die(http.status());
  return *std::move(http);
}

// Serves /metrics and HTTP until SIGTERM or SIGINT, then stops the router
// (then its HTTP front), the prefill worker and the decode worker, in that
// order.
void ServeUntilSignal(pdserve::MetricsRegistry* metrics, const pdserve::ModelConfig* config,
                      pdserve::SecurityOptions security, Router* router, PrefillWorker* prefill,
                      DecodeWorker* decode) {
  auto metrics_server =
      pdserve::ServeMetrics(absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port), metrics, kProgram);
  if (!metrics_server.ok()) pdserve::Die(metrics_server.status());
  std::unique_ptr<pdserve::OpenAiHttpServer> http = StartHttp(config, metrics, router, std::move(security));

  const int sig = pdserve::WaitForShutdownSignal();
  pdserve::log::Info(absl::StrCat("signal ", sig, ", stopping"), {{"signal", sig}});
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(5);
  router->server.server->Shutdown(deadline);
  http.reset();  // its streams ended with the router's calls
  prefill->server.started.server->Shutdown(deadline);
  prefill->service->Shutdown();
  pdserve::InProcessKvRegistry::Global().Unregister(decode->server.address);
  decode->server.started.server->Shutdown(deadline);
  decode->scheduler->Shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: OpenMP threads yield (common/util/omp_env.h)
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;
  pdserve::InitCli(argc, argv,
                   "Runs router + prefill + decode on loopback in one process.\n"
                   "Usage: pdserve-local --model DIR [--port 50051] [--http-listen 127.0.0.1:8000]\n"
                   "       [--kv-dtype f32|bf16]\n"
                   "Everything listens on loopback only (127.0.0.1) unless --http-listen says otherwise.");
  pdserve::InitServerLogging("local");
  LocalOptions options = OptionsFromFlags(&metrics);  // before the model loads: a bad flag fails fast
  auto loaded = pdserve::LoadEngineFromFlags(options.decode.kv_budget_bytes);
  if (!loaded.ok()) pdserve::Die(loaded.status());
  metrics.SetConstantLabels(pdserve::ModelLabels(loaded->engine->config().name));

  DecodeWorker decode = StartDecodeWorker(*loaded, options.decode);
  PrefillWorker prefill = StartPrefillWorker(*loaded, options.transport, options.prefill, decode.server.address);
  Router router = StartRouter(*loaded, std::move(options.router), options.security, prefill.server.address,
                              decode.server.address);
  pdserve::log::Info(absl::StrFormat("router on 127.0.0.1:%d%s (prefill %s, decode %s, KV hand-off %s); Ctrl-C stops",
                                     router.server.port, options.security.tls() ? " (TLS)" : "",
                                     prefill.server.address, decode.server.address,
                                     absl::GetFlag(FLAGS_kv_transport)),
                     {{"port", router.server.port}});
  ServeUntilSignal(&metrics, &loaded->engine->config(), options.security, &router, &prefill, &decode);
  return 0;
}
