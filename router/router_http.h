// The OpenAI HTTP front door (openai_http.h) of a router process, put
// together one way for pdserve-router and pdserve-local:
//   WorkersHealthy     /health's check: a healthy prefill and a healthy
//                      decode worker
//   RouterHttpOptions  the server's options: program, model, /health from
//                      the two worker pools, /metrics, the public port's
//                      security (TLS, API key)
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/model/config.h"
#include "common/net/metrics.h"
#include "common/net/security_flags.h"
#include "router/openai_http.h"
#include "router/worker_pool.h"

namespace pdserve {

// OK when `prefill` and `decode` each have a healthy worker; Unavailable
// naming the kind that has none (prefill first).
absl::Status WorkersHealthy(const WorkerPool& prefill, const WorkerPool& decode);

// `program` names the server in its log lines, `config` is the model
// served, /health is WorkersHealthy(*prefill, *decode), /metrics renders
// `metrics` (nullptr: 404), `security` is the router's public port's. The
// channel is left to the caller: the router's in-process channel, once its
// gRPC server is up. The pointers must outlive the server.
OpenAiHttpOptions RouterHttpOptions(std::string program, const ModelConfig* config, const WorkerPool* prefill,
                                    const WorkerPool* decode, const MetricsRegistry* metrics,
                                    SecurityOptions security);

}  // namespace pdserve
