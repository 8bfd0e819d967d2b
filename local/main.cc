// pdserve-local: the whole stack in one process on loopback. A router on
// 127.0.0.1:PORT, a prefill worker and a decode worker on ports the kernel
// picks; one copy of the weights shared by both workers, and the in-process
// KV hand-off between them (the same chunks and checks as over gRPC).
// Stops cleanly on SIGTERM or Ctrl-C.
#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "clients/cli_util.h"
#include "common/handoff/kv_transfer.h"
#include "common/net/engine_flags.h"
#include "common/net/metrics.h"
#include "common/net/server.h"
#include "decode_service/batch_scheduler.h"
#include "decode_service/decode_service.h"
#include "prefill_service/prefill_service.h"
#include "router/router_service.h"
#include "router/worker_pool.h"

ABSL_FLAG(int, port, 50051, "Router port on 127.0.0.1.");
ABSL_FLAG(int64_t, kv_budget_mb, 2048, "Decode worker KV budget (MiB).");
ABSL_FLAG(int, max_batch, 64, "Sequences per decode step.");
ABSL_FLAG(uint32_t, max_new_tokens_cap, 4096, "Largest max_new_tokens a request may ask for.");
ABSL_FLAG(int64_t, local_prefill_max_tokens, 0,
          "Prompts of at most this many tokens are prefilled on the decode worker itself (no prefill "
          "worker, no KV hand-off); 0 turns it off.");
ABSL_FLAG(bool, log_requests, false, "Print one line per finished request on stderr.");
ABSL_FLAG(int, metrics_port, 0, "HTTP port for Prometheus /metrics of all three; 0 picks one (printed), -1 turns it off.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address the /metrics HTTP server binds (loopback, like the rest of pdserve-local).");
ABSL_FLAG(std::string, kv_transport, "inprocess", "KV hand-off between the workers: inprocess or grpc.");

int main(int argc, char** argv) {
  pdserve::BlockShutdownSignals();
  pdserve::MetricsRegistry metrics;  // one registry: the series names say which component
  pdserve::InitCli(argc, argv,
                   "Runs router + prefill + decode on loopback in one process.\n"
                   "Usage: pdserve-local --model DIR [--port 50051] [--kv-dtype f32|bf16]");
  auto transport = pdserve::ParseKvTransport(absl::GetFlag(FLAGS_kv_transport));
  if (!transport.ok()) pdserve::Die(transport.status(), 2);
  auto loaded = pdserve::LoadEngineFromFlags();
  if (!loaded.ok()) pdserve::Die(loaded.status());
  const pdserve::Engine* engine = loaded->engine.get();

  // Decode worker.
  pdserve::BatchSchedulerOptions so;
  so.kv_budget_bytes = absl::GetFlag(FLAGS_kv_budget_mb) << 20;
  so.max_batch = absl::GetFlag(FLAGS_max_batch);
  so.model_fingerprint = loaded->fingerprint;
  so.metrics = &metrics;
  so.local_prefill_max_tokens = std::max(so.local_prefill_max_tokens, absl::GetFlag(FLAGS_local_prefill_max_tokens));
  pdserve::BatchScheduler scheduler(engine, so);
  scheduler.Start();
  pdserve::DecodeService decode_service(&scheduler);
  auto decode_server = pdserve::StartServer("127.0.0.1:0", {&decode_service});
  if (!decode_server.ok()) pdserve::Die(decode_server.status());
  const std::string decode_address = absl::StrCat("127.0.0.1:", decode_server->port);
  pdserve::InProcessKvRegistry::Global().Register(decode_address, &scheduler);

  // Prefill worker.
  auto sender = pdserve::MakeKvSender(*transport, engine->config());
  pdserve::PrefillServiceOptions po;
  po.model_fingerprint = loaded->fingerprint;
  po.allowed_decode_addresses = {decode_address};
  po.metrics = &metrics;
  pdserve::PrefillService prefill_service(engine, sender.get(), po);
  prefill_service.Start();
  auto prefill_server = pdserve::StartServer("127.0.0.1:0", {&prefill_service});
  if (!prefill_server.ok()) pdserve::Die(prefill_server.status());
  const std::string prefill_address = absl::StrCat("127.0.0.1:", prefill_server->port);

  // Router.
  auto tokenizer = pdserve::MakeTokenizer(engine->config(), loaded->model_dir);
  if (absl::IsUnimplemented(tokenizer.status()) || absl::IsNotFound(tokenizer.status())) {
    // A model without its tokenizer file (random weights for benchmarks) is
    // still served, as token ids; say so once, loudly.
    std::fprintf(stderr, "%s: warning: %s; serving token_ids prompts only\n", "pdserve-local",
                 std::string(tokenizer.status().message()).c_str());
    tokenizer = pdserve::MakeIdsOnlyTokenizer(engine->config().vocab_size, std::string(tokenizer.status().message()));
  }
  if (!tokenizer.ok()) pdserve::Die(tokenizer.status());
  pdserve::WorkerPoolOptions ppo, dpo;
  ppo.addresses = {prefill_address};
  dpo.addresses = {decode_address};
  pdserve::WorkerPool prefill_pool(pdserve::WorkerKind::kPrefill, ppo);
  pdserve::WorkerPool decode_pool(pdserve::WorkerKind::kDecode, dpo);
  prefill_pool.Start();
  decode_pool.Start();
  pdserve::RouterOptions ro;
  ro.limits.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens_cap);
  ro.log_requests = absl::GetFlag(FLAGS_log_requests);
  ro.local_prefill_max_tokens = absl::GetFlag(FLAGS_local_prefill_max_tokens);
  ro.metrics = &metrics;
  pdserve::RouterService router(engine->config(), std::move(*tokenizer), &prefill_pool, &decode_pool, ro);
  auto router_server = pdserve::StartServer(absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port)), {&router});
  if (!router_server.ok()) pdserve::Die(router_server.status());
  std::fprintf(stderr,
               "pdserve-local: router on 127.0.0.1:%d (prefill %s, decode %s, KV hand-off %s); "
               "Ctrl-C stops\n",
               router_server->port, prefill_address.c_str(), decode_address.c_str(),
               absl::GetFlag(FLAGS_kv_transport).c_str());

  auto metrics_server = pdserve::ServeMetrics(absl::GetFlag(FLAGS_metrics_host), absl::GetFlag(FLAGS_metrics_port),
                                              &metrics, "pdserve-local");
  if (!metrics_server.ok()) pdserve::Die(metrics_server.status());

  const int sig = pdserve::WaitForShutdownSignal();
  std::fprintf(stderr, "pdserve-local: signal %d, stopping\n", sig);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(5);
  router_server->server->Shutdown(deadline);
  prefill_server->server->Shutdown(deadline);
  prefill_service.Shutdown();
  pdserve::InProcessKvRegistry::Global().Unregister(decode_address);
  decode_server->server->Shutdown(deadline);
  scheduler.Shutdown();
  return 0;
}
